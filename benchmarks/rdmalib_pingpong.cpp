// rdmalib_pingpong: the ping-pong of raw_libfabric_pingpong, through rdmalib's
// public API only (Fabric, Listener, Connection, Operations, Buffer). Same
// options, same protocol, same buffer layout and same output, so that
// run-pingpong.sh can report rdmalib / raw per (mode, size).
//
// Modes (client side; the server mirrors them):
//  * send:     Operations::send(size) -> wait for the reply on the Recv queue.
//  * writeimm: Operations::write_imm(size, imm = sequence number) into the
//              peer's target buffer -> wait for the peer's RemoteWriteImm on
//              the Recv queue (its length is not used: tcp reports 0).
// One round trip = post + wait for the reply + repost the receive (when one
// was consumed) + reap our own Send completion.
// Replies (--reply own|echo): as raw_libfabric_pingpong's.
//
// Waiting: --wait busy spins on Operations::poll; --wait block sleeps in
// Operations::wait. "auto" is busy: rdmalib's poll already yields the CPU on
// providers whose progress thread would otherwise starve (sockets).
//
// The rdmalib side itself (class Side) is in rdmalib_side.hpp, which
// raw_vs_rdmalib_pingpong shares.
#include <rdmalib/rdmalib.hpp>

#include <spdlog/spdlog.h>

#include "pingpong_common.hpp"
#include "rdmalib_side.hpp"

namespace {

using namespace pingpong;
using namespace rdside;

// The loops are pingpong_loop.hpp's, the same as raw_libfabric_pingpong's.

void server(const Options &o, Oob &oob) {
  Side side(o, true);
  side.establish_server(oob);
  serve_all(side, o, oob);
  side.close();
}

void client(const Options &o, Oob &oob) {
  Side side(o, false);
  side.establish_client(oob);
  RunInfo info{"rdmalib", side.fabric().provider(), side.endpoint_name(), side.wait_policy(),
               side.fabric().describe() + (g_reply == Reply::Echo ? " reply=echo" : "")};
  measure_all(side, o, oob, info, rdmalib::Fabric::backend_name(),
              rdmalib::Fabric::backend_version());
  side.close();
}

} // namespace

std::string pingpong::version_text(const char *program) {
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend " +
         rdmalib::Fabric::backend_name() + " " + rdmalib::Fabric::backend_version();
}

int main(int argc, char **argv) {
  ExtraOptions extra;
  extra.add = add_reply_option;
  extra.read = read_reply_option;
  extra.fingerprint = reply_fingerprint;
  return guarded_main(
      argc, argv, "rdmalib_pingpong",
      "Ping-pong through rdmalib's public API; compare with raw_libfabric_pingpong.",
      [](const Options &o) {
        // The start-up line (Fabric::describe) goes into our header;
        // keep rdmalib's own info logging out of the table.
        spdlog::set_level(spdlog::level::warn);
        rdside::reclaim_stale_regions();
        return run_pair(
            o, [&](Oob &oob) { server(o, oob); }, [&](Oob &oob) { client(o, oob); });
      },
      extra);
}
