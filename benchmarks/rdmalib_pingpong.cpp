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
using namespace std::chrono_literals;

void server(const Options &o, Oob &oob) {
  Side side(o, true);
  side.establish_server(oob);
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      oob.barrier(++tag, "the client to start a measurement");
      for (size_t i = 0;; ++i) {
        RxEvent ev = side.wait_rx("the client's ping");
        check_event(ev, mode, size, i);
        // The client marks its last ping in the first payload byte.
        bool last =
            static_cast<unsigned char>((mode == Mode::Send ? side.slot_buf(ev.slot)
                                                           : side.target_buf())[0]) == kLastMarker;
        if (mode == Mode::Send)
          side.send(size);
        else
          side.write_imm(size, static_cast<uint32_t>(i));
        repost_if_consumed(side, ev);
        side.wait_tx("the server's reply to complete");
        if (last)
          break;
      }
      oob.barrier(++tag, "the client to finish a measurement");
    }
  }
  oob.barrier(~0u, "the client to finish");
  side.close();
}

void client(const Options &o, Oob &oob) {
  Side side(o, false);
  side.establish_client(oob);
  RunInfo info{"rdmalib", side.fabric().provider(), side.endpoint_name(), side.wait_policy(),
               side.fabric().describe()};
  print_header(o, info);
  std::vector<Row> rows;
  std::vector<double> us;
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      Schedule sched = schedule_for(o, size);
      us.clear();
      us.reserve(sched.iters);
      // (No data is in flight here: the server waits at the barrier.)
      char *landing = side.target_buf();
      landing[0] = landing[size - 1] = 0;
      for (int s = 0; s < 2; ++s)
        side.slot_buf(s)[0] = side.slot_buf(s)[size - 1] = 0;
      oob.barrier(++tag, "the server to start a measurement");
      for (size_t i = 0;; ++i) {
        auto t0 = Clock::now();
        bool last = sched.last(i, t0);
        // Our previous ping has completed (wait_tx), so its buffer is ours.
        side.send_buf()[0] = static_cast<char>(last ? kLastMarker : kClientFill);
        if (mode == Mode::Send)
          side.send(size);
        else
          side.write_imm(size, static_cast<uint32_t>(i));
        RxEvent ev = side.wait_rx("the server's reply");
        repost_if_consumed(side, ev);
        side.wait_tx("the client's ping to complete");
        auto t1 = Clock::now();
        check_event(ev, mode, size, i);
        if (i == 0) {
          const char *got = mode == Mode::Send ? side.slot_buf(ev.slot) : landing;
          if (static_cast<unsigned char>(got[0]) != kServerFill ||
              static_cast<unsigned char>(got[size - 1]) != kServerFill)
            die("%s of %zu bytes: the reply's bytes did not arrive", mode_name(mode), size);
        }
        if (i >= sched.warm)
          us.push_back(elapsed_us(t0, t1));
        if (last)
          break;
      }
      oob.barrier(++tag, "the server to finish a measurement");
      rows.push_back(summarise(mode, size, us));
      print_row(rows.back());
    }
  }
  write_csv(o, info, rows);
  write_json(o, info, rdmalib::Fabric::backend_name(), rdmalib::Fabric::backend_version(), rows);
  oob.barrier(~0u, "the server to finish");
  side.close();
}

} // namespace

std::string pingpong::version_text(const char *program) {
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend " +
         rdmalib::Fabric::backend_name() + " " + rdmalib::Fabric::backend_version();
}

int main(int argc, char **argv) {
  return guarded_main(
      argc, argv, "rdmalib_pingpong",
      "Ping-pong through rdmalib's public API; compare with raw_libfabric_pingpong.",
      [](const Options &o) {
        // The start-up line (Fabric::describe) goes into our header;
        // keep rdmalib's own info logging out of the table.
        spdlog::set_level(spdlog::level::warn);
        return run_pair(
            o, [&](Oob &oob) { server(o, oob); }, [&](Oob &oob) { client(o, oob); });
      });
}
