// rfaas_soak: many hot invocations of echo on one worker, every output
// checked byte for byte, for scripts/soak.sh (which reads the memory of this
// client, the executor manager and the executor at the start and the end).
//
// Each call's input is filled with a pattern derived from its sequence number
// (so a stale or misplaced result cannot pass), sizes cycle through --sizes,
// and the input is registered memory (rfaas::allocator, zero copy). With
// --handshake the program stops twice and waits for a line on stdin: after
// the allocation and --warmup calls ("soak: start <pid>" on stdout), and after
// the last call, before deallocating ("soak: end <pid>"), so that the caller
// measures every process at the same two points.
#include "rfaas_common.hpp"

#include <chrono>
#include <cstring>
#include <iostream>

#include "options.hpp"

/// Named once: the hot loops pass the hash, not the name (rfaas/function_name.hpp).
static constexpr rfaas::function_name kEcho("echo");

namespace {

/// Resident set of this process in KiB (/proc/self/status VmRSS), 0 if unknown.
long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::stol(line.substr(6));
  return 0;
}

/// The bytes of call `seq` at position i: cheap, and different for every call.
inline void fill(uint8_t *p, size_t n, uint64_t seq) {
  uint64_t x = seq * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + i, &x, 8);
  }
  for (; i < n; ++i)
    p[i] = static_cast<uint8_t>(seq + i);
}

void handshake(bool on, const char *phase) {
  if (!on)
    return;
  std::printf("soak: %s %d\n", phase, static_cast<int>(::getpid()));
  std::fflush(stdout);
  std::string line;
  if (!std::getline(std::cin, line))
    throw std::runtime_error(std::string("stdin closed at the ") + phase + " handshake");
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rfaas_soak",
                          "Many hot invocations of echo, every output verified (scripts/soak.sh).");
  rfaas::bench::add_common_options(cli);
  // clang-format off
  cli.add_options()
    ("n,invocations", "invocations after the warm-up", rfaas::cli::value<uint64_t>()->default_value("1000000"))
    ("w,warmup", "invocations before the start point", rfaas::cli::value<uint64_t>()->default_value("1000"))
    ("s,sizes", "payload sizes, used in turn (suffix K, M)", rfaas::cli::value<std::string>()->default_value("8,512,4K"))
    ("hot-timeout", "worker hot-polling ms: -1 always hot, 0 never", rfaas::cli::value<int32_t>()->default_value("-1"))
    ("report-every", "print progress every this many invocations (0 = never)", rfaas::cli::value<uint64_t>()->default_value("100000"))
    ("handshake", "stop at the start and end points until a line arrives on stdin");
  // clang-format on
  rfaas::cli::ParseResult args;
  int status = 0;
  if (!rfaas::bench::parse_or_usage(cli, argc, argv, args, status))
    return status;
  try {
    const std::vector<size_t> sizes = rfaas::bench::parse_sizes(args["sizes"].as<std::string>());
    if (sizes.empty())
      throw rfaas::cli::UsageError("--sizes is empty");
    const size_t largest = *std::max_element(sizes.begin(), sizes.end());
    const uint64_t n = args["invocations"].as<uint64_t>();
    const uint64_t warm = args["warmup"].as<uint64_t>();
    const uint64_t every = args["report-every"].as<uint64_t>();
    const bool hs = args.count("handshake") != 0;
    rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
    rfaas::executor ex(dev);
    rfaas::allocation_options o;
    o.cores = 1;
    o.library = args["library"].as<std::string>();
    o.hot_timeout_ms = args["hot-timeout"].as<int32_t>();
    o.max_input_size = static_cast<uint32_t>(largest);
    o.max_output_size = static_cast<uint32_t>(largest);
    ex.allocate(rfaas::bench::parse_manager(args["manager"].as<std::string>()), o);
    std::vector<uint8_t, rfaas::allocator<uint8_t>> in(largest, 0, rfaas::allocator<uint8_t>(ex));
    std::vector<uint8_t> out(largest), expect(largest);
    uint64_t seq = 0, failures = 0;
    // Latencies of the first million calls at most, in memory touched before
    // the start point: the client's RSS then grows only if something leaks.
    std::vector<double> us(static_cast<size_t>(std::min<uint64_t>(n, 1000000)), 0.0);
    size_t timed_calls = 0;

    auto call = [&](bool timed) {
      const size_t size = sizes[seq % sizes.size()];
      ++seq;
      fill(in.data(), size, seq);
      auto t0 = std::chrono::steady_clock::now();
      rfaas::result r = ex.execute(kEcho, rfaas::const_buffer(in.data(), size), out);
      auto t1 = std::chrono::steady_clock::now();
      fill(expect.data(), size, seq);
      if (!r.ok() || r.output_size != size || std::memcmp(out.data(), expect.data(), size) != 0) {
        if (++failures <= 10)
          std::fprintf(stderr, "rfaas_soak: call %llu (%zu B) wrong: status %s, %u bytes\n",
                       static_cast<unsigned long long>(seq), size, rfaas::to_string(r.status),
                       r.output_size);
      }
      if (timed && timed_calls < us.size())
        us[timed_calls++] = std::chrono::duration<double, std::micro>(t1 - t0).count();
      std::memset(out.data(), 0, size); // a call that writes nothing cannot pass
    };

    for (uint64_t i = 0; i < warm; ++i)
      call(false);
    const long rss_start = rss_kib();
    handshake(hs, "start");
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 1; i <= n; ++i) {
      call(true);
      if (every && i % every == 0) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(
            stderr, "rfaas_soak: %llu / %llu calls, %llu wrong, %.0f calls/s, rss %ld KiB\n",
            static_cast<unsigned long long>(i), static_cast<unsigned long long>(n),
            static_cast<unsigned long long>(failures), static_cast<double>(i) / s, rss_kib());
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const long rss_end = rss_kib();
    handshake(hs, "end");
    us.resize(timed_calls);
    rfaas::bench::Stats s = rfaas::bench::stats(us);
    std::printf("soak: %llu calls in %.1f s (%.0f/s), %llu wrong; median %.2f us, p99 %.2f us, "
                "max %.1f us; client rss %ld -> %ld KiB\n",
                static_cast<unsigned long long>(n), seconds,
                seconds > 0 ? static_cast<double>(n) / seconds : 0.0,
                static_cast<unsigned long long>(failures), s.median, s.p99,
                us.empty() ? 0.0 : *std::max_element(us.begin(), us.end()), rss_start, rss_end);
    std::fflush(stdout);
    bench_json::Value doc =
        rfaas::bench::document("rfaas_soak", argc, argv, dev, ex.describe_network(), args);
    doc["parameters"]["invocations"] = n;
    doc["parameters"]["warmup"] = warm;
    doc["parameters"]["sizes"] = args["sizes"].as<std::string>();
    doc["parameters"]["hot_timeout_ms"] = o.hot_timeout_ms;
    bench_json::Value v = rfaas::bench::latency_result("echo-mixed", largest, s);
    v["kind"] = "soak";
    v["invocations"] = n;
    v["wrong"] = failures;
    v["seconds"] = seconds;
    v["client_rss_kib_start"] = rss_start;
    v["client_rss_kib_end"] = rss_end;
    doc["results"].push(std::move(v));
    rfaas::bench::write_json(args, doc);
    ex.deallocate();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rfaas_soak: %s\n", e.what());
    return 1;
  }
}
