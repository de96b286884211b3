// raw_libfabric_msgrate: the message-rate baseline. Write-with-immediate
// operations with a window of them outstanding, written directly against
// libfabric (raw_libfabric_endpoint.hpp, the same endpoint as the raw
// ping-pong), so that pipelined rFaaS invocations per second
// (rfaas_throughput_benchmark) can be reported as a ratio to it.
//
// Patterns (the client keeps --window operations outstanding):
//  * echo:   the client writes a request (fi_writedata, imm = sequence), the
//            server answers each with a write-with-data of the same size and
//            immediate. One operation = one request and its reply: what a
//            pipelined invocation is, without any function, header or
//            library in between. The figure compared with rFaaS.
//  * oneway: the client only writes; the server reaps (and reposts where
//            remote CQ data consumes a receive). Messages per second of one
//            direction: the provider's ceiling.
// Both sides busy-poll completion queues without a wait object (the fastest
// setup for spinning here, docs/BACKEND-BUGS.md), read completions in batches,
// and post nothing but what the pattern needs. The immediate carries the
// sequence number in 31 bits and, on the last operation, the flag kLastFlag:
// the server then knows how many to expect, whatever order completions come
// in.
//
// Timing: the client counts operations completed (replies in echo, the
// server's count at a barrier in oneway) after a warm-up, over --budget seconds
// or --iters operations, whichever ends first.
#include "raw_libfabric_endpoint.hpp"

namespace {

using namespace pingpong;
using namespace raw;

constexpr uint64_t kLastFlag = 0x80000000u;
constexpr uint64_t kSeqMask = 0x7fffffffu;

struct RateOptions {
  std::string pattern = "echo";
  int window = 16;
};

/// Contexts of outstanding operations: one each (FI_CONTEXT), given back
/// when their completion is reaped, whatever order completions come in.
class ContextPool {
public:
  explicit ContextPool(size_t n) : ctx_(n), free_(n) {
    for (size_t i = 0; i < n; ++i)
      free_[i] = &ctx_[i];
    top_ = n;
  }
  bool empty() const { return top_ == 0; }
  fi_context *take() { return free_[--top_]; }
  void give(void *c) {
    if (top_ < free_.size())
      free_[top_++] = static_cast<fi_context *>(c);
  }

private:
  std::vector<fi_context> ctx_;
  std::vector<fi_context *> free_;
  size_t top_ = 0;
};

struct RateRow {
  std::string pattern;
  size_t size = 0;
  int window = 0;
  uint64_t ops = 0;
  double seconds = 0;
  double rate() const { return seconds > 0 ? static_cast<double>(ops) / seconds : 0; }
};

void check_write(const RxEvent &ev) {
  if (!ev.remote_write)
    die("expected a write-with-data, got a message of %zu bytes", ev.len);
}

/// Iterations and warm-up for a rate: many more than a ping-pong needs, since
/// each costs a few microseconds or less; the budget usually ends it first.
size_t rate_iterations(const Options &o) { return o.iters ? o.iters : 2000000; }
size_t rate_warmup(const Options &o, int window) {
  return o.warmup ? o.warmup : std::max<size_t>(1000, 20 * static_cast<size_t>(window));
}

void server(const Options &o, const RateOptions &ro, Oob &oob) {
  RawEndpoint ep(o, true, ro.window);
  ep.establish(oob);
  ep.track_tx_contexts();
  ContextPool pool(RawEndpoint::kMaxRxSlots * 2);
  const bool echo = ro.pattern == "echo";
  uint32_t tag = 0;
  for (size_t size : o.sizes) {
    oob.barrier(++tag, "the client to start a measurement");
    uint64_t got = 0, expected = UINT64_MAX;
    watchdog().what = "the client's writes";
    while (got < expected || ep.tx_outstanding() > 0) {
      ep.drain_rx([&](const RxEvent &ev) {
        check_write(ev);
        ++got;
        if (ev.data & kLastFlag)
          expected = (ev.data & kSeqMask) + 1;
        if (ev.slot >= 0)
          ep.post_recv(ev.slot);
        if (echo) {
          while (pool.empty()) {
            ep.drain_tx([&](void *c) { pool.give(c); });
            spin_check();
          }
          ep.post_writedata(size, ev.data, pool.take());
        }
      });
      if (ep.tx_outstanding() > 0)
        ep.drain_tx([&](void *c) { pool.give(c); });
      spin_check();
    }
    oob.barrier(++tag, "the client to finish a measurement");
    oob.send_value<uint64_t>(got);
  }
  oob.barrier(~0u, "the client to finish");
}

void client(const Options &o, const RateOptions &ro, Oob &oob) {
  RawEndpoint ep(o, false, ro.window);
  ep.establish(oob);
  ep.track_tx_contexts();
  const std::string libfabric = libfabric_version();
  if (!o.quiet)
    std::printf("# raw_libfabric_msgrate impl=raw provider=%s endpoint=%s wait=%s pattern=%s "
                "window=%d libfabric=%s\n",
                ep.provider_name().c_str(), ep.endpoint_name(), ep.wait_policy(),
                ro.pattern.c_str(), ro.window, libfabric.c_str());
  std::printf("%-8s %9s %6s %10s %9s %13s %9s\n", "pattern", "size", "window", "ops", "seconds",
              "ops_per_s", "GB/s");
  std::fflush(stdout);
  ContextPool pool(static_cast<size_t>(ro.window));
  const bool echo = ro.pattern == "echo";
  const uint64_t window = static_cast<uint64_t>(ro.window);
  const auto budget = std::chrono::duration<double>(o.budget_s);
  std::vector<RateRow> rows;
  uint32_t tag = 0;
  for (size_t size : o.sizes) {
    const uint64_t warm = rate_warmup(o, ro.window);
    const uint64_t total_max = warm + rate_iterations(o);
    if (total_max > kSeqMask)
      die("--iters too large: at most %llu operations per measurement",
          static_cast<unsigned long long>(kSeqMask - warm));
    oob.barrier(++tag, "the server to start a measurement");
    uint64_t sent = 0, done = 0, total = UINT64_MAX;
    Clock::time_point t0{}, t1{};
    watchdog().what = echo ? "the server's replies" : "our writes to complete";
    // In echo an operation is done when its reply arrives; in oneway when its
    // write completed locally (the server's count confirms delivery below).
    while (done < total || ep.tx_outstanding() > 0) {
      while (sent < total && sent - done < window && !pool.empty()) {
        bool last = sent + 1 == total_max;
        // The clock is read every 256 posts, once the warm-up is over.
        if (!last && o.budget_s > 0 && done >= warm && sent - warm >= 1000 && (sent & 255) == 0 &&
            Clock::now() - t0 > budget)
          last = true;
        ep.post_writedata(size, (sent & kSeqMask) | (last ? kLastFlag : 0), pool.take());
        ++sent;
        if (last)
          total = sent;
      }
      if (echo)
        ep.drain_rx([&](const RxEvent &ev) {
          check_write(ev);
          if ((ev.data & kSeqMask) >= sent)
            die("a reply for operation %llu, which was never sent",
                static_cast<unsigned long long>(ev.data & kSeqMask));
          if (ev.slot >= 0)
            ep.post_recv(ev.slot);
          if (++done == warm)
            t0 = Clock::now();
        });
      ep.drain_tx([&](void *c) {
        pool.give(c);
        if (!echo && ++done == warm)
          t0 = Clock::now();
      });
      spin_check();
    }
    oob.barrier(++tag, "the server to finish a measurement");
    t1 = Clock::now();
    uint64_t server_got = oob.recv_value<uint64_t>("the server's count");
    if (server_got != total)
      die("the server saw %llu writes, the client sent %llu",
          static_cast<unsigned long long>(server_got), static_cast<unsigned long long>(total));
    RateRow r;
    r.pattern = ro.pattern;
    r.size = size;
    r.window = ro.window;
    r.ops = total - warm;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    rows.push_back(r);
    double bytes = static_cast<double>(size) * (echo ? 2.0 : 1.0);
    std::printf("%-8s %9zu %6d %10llu %9.3f %13.0f %9.3f\n", r.pattern.c_str(), r.size, r.window,
                static_cast<unsigned long long>(r.ops), r.seconds, r.rate(),
                r.rate() * bytes / 1e9);
    std::fflush(stdout);
  }

  RunInfo info{"raw", ep.provider_name(), ep.endpoint_name(), ep.wait_policy(), ""};
  if (!o.csv.empty()) {
    std::ofstream out = open_csv(o, "impl,provider,endpoint,wait,pattern,size,window,clients,"
                                    "workers,ops,seconds,ops_per_s\n");
    for (const RateRow &r : rows)
      out << "raw,\"" << info.provider << "\"," << info.endpoint << "," << info.wait << ","
          << r.pattern << "," << r.size << "," << r.window << ",1,1," << r.ops << "," << r.seconds
          << "," << r.rate() << "\n";
  }
  if (!o.json.empty()) {
    bench_json::Value doc = bench_json::document(
        {o.program, "libfabric", libfabric, info.provider, info.endpoint, o.argv});
    bench_json::Value &p = doc["parameters"];
    p["impl"] = "raw";
    p["wait"] = info.wait;
    p["pattern"] = ro.pattern;
    p["window"] = ro.window;
    p["pinned"] = o.pin;
    p["server_core"] = o.server_core;
    p["client_core"] = o.client_core;
    p["iters"] = o.iters;
    p["budget_s"] = o.budget_s;
    for (const RateRow &r : rows) {
      bench_json::Value v = bench_json::Value::object();
      v["kind"] = "rate";
      v["impl"] = "raw";
      v["pattern"] = r.pattern;
      v["size"] = r.size;
      v["window"] = r.window;
      v["clients"] = 1;
      v["workers"] = 1;
      v["ops"] = r.ops;
      v["seconds"] = r.seconds;
      v["ops_per_s"] = r.rate();
      doc["results"].push(std::move(v));
    }
    try {
      bench_json::write(o.json, doc);
    } catch (const std::exception &e) {
      die("%s", e.what());
    }
  }
  oob.barrier(~0u, "the server to finish");
}

} // namespace

std::string pingpong::version_text(const char *program) {
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend libfabric " +
         raw::libfabric_version() + " (raw, no rdmalib)";
}

int main(int argc, char **argv) {
  RateOptions ro;
  ExtraOptions extra;
  extra.add = [](rfaas::cli::Options &spec) {
    // clang-format off
    spec.add_options()
      ("pattern", "echo (request and reply, the analogue of an invocation) or oneway",
       rfaas::cli::value<std::string>()->default_value("echo"))
      ("window", "operations outstanding (1..64)", rfaas::cli::value<int>()->default_value("16"));
    // clang-format on
  };
  extra.read = [&](const rfaas::cli::ParseResult &r) {
    ro.pattern = r["pattern"].as<std::string>();
    if (ro.pattern != "echo" && ro.pattern != "oneway")
      throw std::invalid_argument("--pattern must be echo or oneway, not '" + ro.pattern + "'");
    ro.window = r["window"].as<int>();
    if (ro.window < 1 || ro.window > RawEndpoint::kMaxRxSlots)
      throw std::invalid_argument("--window must be 1..64");
    if (r["modes"].as<std::string>() != "send,writeimm" &&
        r["modes"].as<std::string>().find("send") != std::string::npos)
      throw std::invalid_argument("raw_libfabric_msgrate measures write-with-immediate only "
                                  "(-m writeimm)");
  };
  return guarded_main(
      argc, argv, "raw_libfabric_msgrate",
      "Message rate with a window of write-with-immediate operations, written directly against "
      "libfabric: the baseline for rfaas_throughput_benchmark.",
      [&](const Options &o) {
        return run_pair(
            o, [&](Oob &oob) { server(o, ro, oob); }, [&](Oob &oob) { client(o, ro, oob); });
      },
      extra);
}
