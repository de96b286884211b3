// raw_libfabric_pingpong: the transport baseline. A ping-pong written directly
// against libfabric, with no rdmalib in between, so that rdmalib_pingpong (the
// same measurement through rdmalib's public API) can be reported as a ratio to
// it. Its endpoint (raw_libfabric_endpoint.hpp) includes libfabric headers,
// which DESIGN.md §2 allows outside rdmalib/ only in raw baselines.
//
// It does what a careful direct user of libfabric would do and nothing more:
// one endpoint, separate transmit and receive completion queues, one memory
// registration covering all buffers, receives pre-posted in two slots, no
// allocation and no logging on the data path.
//
// Modes (client side; the server mirrors them):
//  * send:     fi_send(size) -> wait for the reply's receive completion.
//  * writeimm: fi_writedata(size, imm = sequence number) into the peer's
//              target buffer -> wait for the peer's write-with-data, recognised
//              on the receive CQ by FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA. The
//              completion's len is never used: tcp reports 0 there.
// One round trip = post + wait for the reply + repost the receive + reap our own
// transmit completion: everything a steady-state loop has to do.
//
// Replies (--reply): "own" (default) answers from the server's own send
// buffer, which nobody writes, so at large sizes the client copies lines that
// stay clean, and from the second round trip on often sit in its own cache.
// "echo" answers with the bytes the server just received, as an echo function
// must: the client then reads memory the server's core has just written. That
// is the fair baseline for rFaaS's echo functions (run-rfaas-benchmarks.sh);
// on shm at 1 MiB it is ~1.2x the "own" round trip here.
//
// Providers: tcp (MSG), sockets (MSG or RDM), shm (RDM), "tcp;ofi_rxm" (RDM),
// or anything else that offers FI_MSG | FI_RMA with remote CQ data.
#include "raw_libfabric_endpoint.hpp"

namespace {

using namespace pingpong;
using namespace raw;

// ---- the ping-pong (the loops are pingpong_loop.hpp's) -------------------------------

void server(const Options &o, Oob &oob) {
  RawEndpoint ep(o, true);
  ep.establish(oob);
  serve_all(ep, o, oob);
}

void client(const Options &o, Oob &oob) {
  RawEndpoint ep(o, false);
  ep.establish(oob);
  RunInfo info{"raw", ep.provider_name(), ep.endpoint_name(), ep.wait_policy(),
               "libfabric=" + libfabric_version() + (g_reply == Reply::Echo ? " reply=echo" : "")};
  measure_all(ep, o, oob, info, "libfabric", libfabric_version());
}

} // namespace

std::string pingpong::version_text(const char *program) {
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend libfabric " +
         raw::libfabric_version() + " (raw, no rdmalib)";
}

int main(int argc, char **argv) {
  ExtraOptions extra;
  extra.add = add_reply_option;
  extra.read = read_reply_option;
  extra.fingerprint = reply_fingerprint;
  return guarded_main(
      argc, argv, "raw_libfabric_pingpong",
      "Ping-pong written directly against libfabric: the baseline for rdmalib_pingpong.",
      [](const Options &o) {
        return run_pair(
            o, [&](Oob &oob) { server(o, oob); }, [&](Oob &oob) { client(o, oob); });
      },
      extra);
}
