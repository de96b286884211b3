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

// ---- the ping-pong ---------------------------------------------------------------------

/// --reply echo: the server answers with the bytes it received.
bool echo = false;

void server(const Options &o, Oob &oob) {
  RawEndpoint ep(o, true);
  ep.establish(oob);
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      oob.barrier(++tag, "the client to start a measurement");
      for (size_t i = 0;; ++i) {
        RxEvent ev = ep.wait_rx("the client's ping");
        check_event(ev, mode, size, i);
        // The client marks its last ping in the first payload byte.
        bool last =
            static_cast<unsigned char>(
                (mode == Mode::Send ? ep.slot_buf(ev.slot) : ep.target_buf())[0]) == kLastMarker;
        if (echo) {
          // The received bytes are the reply's source: the slot is reposted
          // only once the reply has left it.
          if (mode == Mode::Send)
            ep.post_send_from(ep.slot_buf(ev.slot), size);
          else
            ep.post_writedata_from(ep.target_buf(), size, i & 0xffffffffu);
          ep.wait_tx("the server's reply to complete");
          repost_if_consumed(ep, ev);
        } else {
          if (mode == Mode::Send)
            ep.post_send(size);
          else
            ep.post_writedata(size, i & 0xffffffffu);
          repost_if_consumed(ep, ev);
          ep.wait_tx("the server's reply to complete");
        }
        if (last)
          break;
      }
      oob.barrier(++tag, "the client to finish a measurement");
    }
  }
  oob.barrier(~0u, "the client to finish");
}

void client(const Options &o, Oob &oob) {
  RawEndpoint ep(o, false);
  ep.establish(oob);
  RunInfo info{"raw", ep.provider_name(), ep.endpoint_name(), ep.wait_policy(),
               std::string("libfabric=") + std::to_string(FI_MAJOR(fi_version())) + "." +
                   std::to_string(FI_MINOR(fi_version())) + (echo ? " reply=echo" : "")};
  print_header(o, info);
  std::vector<Row> rows;
  std::vector<double> us;
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      Schedule sched = schedule_for(o, size);
      us.clear();
      us.reserve(sched.iters);
      // Clear where the reply lands, to check the first one carried the bytes.
      // (No data is in flight here: the server waits at the barrier.)
      char *landing = ep.target_buf();
      landing[0] = landing[size - 1] = 0;
      for (int s = 0; s < 2; ++s)
        ep.slot_buf(s)[0] = ep.slot_buf(s)[size - 1] = 0;
      oob.barrier(++tag, "the server to start a measurement");
      for (size_t i = 0;; ++i) {
        auto t0 = Clock::now();
        bool last = sched.last(i, t0);
        // Our previous ping has completed (wait_tx), so its buffer is ours.
        const char sent = static_cast<char>(last ? kLastMarker : kClientFill);
        ep.send_buf()[0] = sent;
        if (mode == Mode::Send)
          ep.post_send(size);
        else
          ep.post_writedata(size, i & 0xffffffffu);
        RxEvent ev = ep.wait_rx("the server's reply");
        repost_if_consumed(ep, ev);
        ep.wait_tx("the client's ping to complete");
        auto t1 = Clock::now();
        check_event(ev, mode, size, i);
        if (i == 0) {
          const char *got = mode == Mode::Send ? ep.slot_buf(ev.slot) : landing;
          // An echo carries our ping back: its first byte, then our fill.
          const char first = echo ? sent : static_cast<char>(kServerFill);
          const char end = size == 1 ? first : static_cast<char>(echo ? kClientFill : kServerFill);
          if (got[0] != first || got[size - 1] != end)
            die("%s of %zu bytes: the reply's bytes did not arrive%s", mode_name(mode), size,
                echo ? " (an echo of the ping)" : "");
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
  write_json(o, info, "libfabric",
             std::to_string(FI_MAJOR(fi_version())) + "." + std::to_string(FI_MINOR(fi_version())),
             rows);
  oob.barrier(~0u, "the server to finish");
}

} // namespace

std::string pingpong::version_text(const char *program) {
  uint32_t v = fi_version();
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend libfabric " +
         std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)) + " (raw, no rdmalib)";
}

int main(int argc, char **argv) {
  ExtraOptions extra;
  extra.add = [](rfaas::cli::Options &spec) {
    spec.add_options()("reply",
                       "what the server answers with: own (its own buffer, never written) or "
                       "echo (the bytes it received, as an echo function does)",
                       rfaas::cli::value<std::string>()->default_value("own"));
  };
  extra.read = [](const rfaas::cli::ParseResult &r) {
    std::string reply = r["reply"].as<std::string>();
    if (reply != "own" && reply != "echo")
      throw std::invalid_argument("--reply must be own or echo, not '" + reply + "'");
    echo = reply == "echo";
  };
  extra.fingerprint = [] { return std::string("reply=") + (echo ? "echo" : "own"); };
  return guarded_main(
      argc, argv, "raw_libfabric_pingpong",
      "Ping-pong written directly against libfabric: the baseline for rdmalib_pingpong.",
      [](const Options &o) {
        return run_pair(
            o, [&](Oob &oob) { server(o, oob); }, [&](Oob &oob) { client(o, oob); });
      },
      extra);
}
