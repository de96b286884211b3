// rm_lease_benchmark: leases through librfaas (rfaas::resource_manager)
// against a running resource manager with registered nodes.
//
//   latency:    one client, lease then release, each timed: request -> grant
//               and request -> acknowledgement, median and p99.
//   throughput: N client processes, each looping lease + release for a fixed
//               time (lease_load.hpp); leases per second over all of them.
//
//   rm_lease_benchmark --device lo-tcp --resource-manager 127.0.0.1:10100 --mode latency
//   rm_lease_benchmark --device lo-shm --resource-manager ... --mode throughput --clients 1,4,16
//
// The round trip this is compared with (the provider's raw send ping-pong) is
// measured by benchmarks/run-rm-benchmarks.sh in the same run.
//
#include <rfaas/rfaas.hpp>

#include "lease_load.hpp"
#include "stats.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "options.hpp"

#include "cli.hpp"
#include "count_list.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  size_t n = 0;
  double median = 0, p99 = 0, min = 0, mean = 0;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  const bench_stats::Summary sum = bench_stats::summarise_sorted(v);
  s.n = sum.n;
  s.median = sum.median;
  s.p99 = sum.p99;
  s.min = sum.min;
  s.mean = sum.mean;
  return s;
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// Appends `line` to `path`, with `header` first when the file is new or empty.
void append_csv(const std::string &path, const char *header, const std::string &line) {
  if (path.empty())
    return;
  bool fresh;
  {
    std::ifstream in(path);
    fresh = !in.good() || in.peek() == std::ifstream::traits_type::eof();
  }
  std::ofstream out(path, std::ios::app);
  if (!out)
    throw std::runtime_error("cannot open " + path + " for writing");
  if (fresh)
    out << header << "\n";
  out << line << "\n";
  if (!out)
    throw std::runtime_error("writing " + path + " failed");
}

struct Setup {
  rfaas::device device;
  std::string address;
  uint32_t cores = 1;
  uint64_t memory_mib = 64;
  std::chrono::milliseconds duration{60000};
  std::string csv;
};

int run_latency(const Setup &s, size_t iterations, size_t warmup, double budget_s) {
  rfaas::resource_manager rm(s.device, s.address, "bench-latency",
                             rfaas::bench::patient_timeouts());
  for (size_t i = 0; i < warmup; ++i)
    rm.release(rm.lease(s.cores, s.memory_mib, s.duration));
  std::vector<double> lease_us, release_us;
  lease_us.reserve(iterations);
  release_us.reserve(iterations);
  const Clock::time_point start = Clock::now();
  const size_t floor = std::min<size_t>(iterations, 200);
  for (size_t i = 0; i < iterations; ++i) {
    Clock::time_point t0 = Clock::now();
    rfaas::lease l = rm.lease(s.cores, s.memory_mib, s.duration);
    Clock::time_point t1 = Clock::now();
    rm.release(l);
    Clock::time_point t2 = Clock::now();
    lease_us.push_back(us_between(t0, t1));
    release_us.push_back(us_between(t1, t2));
    if (budget_s > 0 && i + 1 >= floor && us_between(start, t2) > budget_s * 1e6)
      break;
  }
  std::printf("%-8s %8s %10s %10s %10s %10s\n", "op", "n", "median_us", "p99_us", "min_us",
              "mean_us");
  for (auto &[op, v] :
       {std::make_pair("lease", &lease_us), std::make_pair("release", &release_us)}) {
    Stats st = stats_of(*v);
    std::printf("%-8s %8zu %10.1f %10.1f %10.1f %10.1f\n", op, st.n, st.median, st.p99, st.min,
                st.mean);
    char line[256];
    std::snprintf(line, sizeof line, "latency,%s,%s,%zu,%.3f,%.3f,%.3f,%.3f", s.device.name.c_str(),
                  op, st.n, st.median, st.p99, st.min, st.mean);
    append_csv(s.csv, "benchmark,device,op,n,median_us,p99_us,min_us,mean_us", line);
  }
  return 0;
}

int run_throughput(const Setup &s, int clients, double seconds) {
  const rfaas::bench::LeaseLoadResult r = rfaas::bench::run_lease_load(
      rfaas::bench::LeaseLoad{s.device, s.address, s.cores, s.memory_mib, s.duration}, clients,
      seconds);
  for (const std::string &m : r.messages)
    std::fprintf(stderr, "rm_lease_benchmark: client error: %s\n", m.c_str());
  std::printf("%-8s %10s %10s %8s %12s %14s %18s\n", "clients", "leases", "refused", "errors",
              "leases_per_s", "requests_per_s", "lease_median_us");
  std::printf("%-8d %10llu %10llu %8llu %12.0f %14.0f %18.1f\n", clients,
              static_cast<unsigned long long>(r.granted),
              static_cast<unsigned long long>(r.refused), static_cast<unsigned long long>(r.errors),
              r.leases_per_s(), r.requests_per_s(), r.lease_median_us);
  char line[256];
  std::snprintf(
      line, sizeof line, "throughput,%s,%d,%.3f,%llu,%llu,%llu,%.1f,%.1f,%.3f",
      s.device.name.c_str(), clients, r.seconds, static_cast<unsigned long long>(r.granted),
      static_cast<unsigned long long>(r.refused), static_cast<unsigned long long>(r.errors),
      r.leases_per_s(), r.requests_per_s(), r.lease_median_us);
  append_csv(s.csv,
             "benchmark,device,clients,seconds,leases,refused,errors,leases_per_s,requests_per_s,"
             "lease_median_us",
             line);
  if (r.missing || r.connected < clients) {
    std::fprintf(stderr, "rm_lease_benchmark: %d of %d clients connected, %d sent no result\n",
                 r.connected, clients, r.missing);
    return 1;
  }
  return r.ok() ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rm_lease_benchmark",
                          "Lease latency (request -> grant) and leases per second from concurrent "
                          "clients, through librfaas against a running resource manager.");
  // clang-format off
  cli.add_options()
    ("devices", "device database", rfaas::cli::value<std::string>()->default_value("config/devices.json"))
    ("device", "device entry", rfaas::cli::value<std::string>()->default_value("lo-tcp"))
    ("resource-manager", "the resource manager's fabric host:port", rfaas::cli::value<std::string>())
    ("mode", "latency or throughput", rfaas::cli::value<std::string>()->default_value("latency"))
    ("cores", "cores per lease", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("memory", "MiB per lease", rfaas::cli::value<uint64_t>()->default_value("64"))
    ("iterations", "latency: leases measured (at most)", rfaas::cli::value<size_t>()->default_value("2000"))
    ("warmup", "latency: unmeasured leases first", rfaas::cli::value<size_t>()->default_value("50"))
    ("budget", "latency: stop after this many seconds once 200 leases are in (0: never)", rfaas::cli::value<double>()->default_value("2"))
    ("clients", "throughput: comma-separated client process counts", rfaas::cli::value<std::string>()->default_value("1,4,16"))
    ("seconds", "throughput: seconds each count runs", rfaas::cli::value<double>()->default_value("2"))
    ("csv", "append CSV rows to this file", rfaas::cli::value<std::string>()->default_value(""));
  // clang-format on
  rfaas::cli::add_standard_options(cli);
  return rfaas::cli::run(
      "rm_lease_benchmark", cli, argc, argv, [](const rfaas::cli::ParseResult &args) {
        rfaas::cli::apply_log_level(args);
        if (!args.count("resource-manager"))
          throw rfaas::cli::UsageError("--resource-manager HOST:PORT is required");
        const std::string mode = args["mode"].as<std::string>();
        if (mode != "latency" && mode != "throughput")
          throw rfaas::cli::UsageError("--mode must be latency or throughput, not \"" + mode +
                                       "\"");
        std::vector<int> counts;
        if (mode == "throughput")
          counts = rfaas::bench::parse_count_list("--clients", args["clients"].as<std::string>());
        const double seconds = args["seconds"].as<double>();
        if (!(seconds > 0 && seconds <= 3600))
          throw rfaas::cli::UsageError("--seconds must be in (0, 3600]");
        Setup s;
        s.device = rfaas::device_database::load(args["devices"].as<std::string>())
                       .find(args["device"].as<std::string>());
        s.address = args["resource-manager"].as<std::string>();
        s.cores = args["cores"].as<uint32_t>();
        s.memory_mib = args["memory"].as<uint64_t>();
        s.csv = args["csv"].as<std::string>();
        if (mode == "latency")
          return run_latency(s, args["iterations"].as<size_t>(), args["warmup"].as<size_t>(),
                             args["budget"].as<double>());
        int rc = 0;
        for (int n : counts)
          rc |= run_throughput(s, n, seconds);
        return rc;
      });
}
