// rm_lease_benchmark: leases through librfaas (rfaas::resource_manager)
// against a running resource manager with registered nodes.
//
//   latency:    one client, lease then release, each timed: request -> grant
//               and request -> acknowledgement, median and p99.
//   throughput: N client processes, each looping lease + release for a fixed
//               time; leases per second over all of them.
//
//   rm_lease_benchmark --device lo-tcp --resource-manager 127.0.0.1:10100 --mode latency
//   rm_lease_benchmark --device lo-shm --resource-manager ... --mode throughput --clients 1,4,16
//
// The round trip this is compared with (the provider's raw send ping-pong) is
// measured by benchmarks/run-rm-benchmarks.sh in the same run.
//
// Throughput clients are processes, not threads, because a resource_manager
// object is one thread's and a real deployment has one per application; they
// are forked before any of them opens the fabric, start together (a pipe
// closed by the parent) and die with the parent (PR_SET_PDEATHSIG). A lease
// refused for lack of free cores (more clients than cores) counts as refused,
// not as an error: the figure is then the rate of grants under contention.
#include <rfaas/rfaas.hpp>

#include "pipe_io.hpp"
#include "stats.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

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
using rfaas::bench::read_full;

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

rfaas::timeouts patient() {
  // tcp;ofi_rxm connects lazily, and on a loaded host 16 clients connecting at
  // once queue behind each other at the resource manager's accept.
  rfaas::timeouts t;
  t.connect = std::chrono::seconds(30);
  return t;
}

int run_latency(const Setup &s, size_t iterations, size_t warmup, double budget_s) {
  rfaas::resource_manager rm(s.device, s.address, "bench-latency", patient());
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

/// What one throughput client reports to the parent.
struct ClientResult {
  uint64_t granted = 0;
  uint64_t refused = 0;
  uint64_t errors = 0;
  double seconds = 0;
  double lease_median_us = 0;
  char error[160] = {};
};

/// The body of one throughput client (a child process). Never returns.
[[noreturn]] void client_process(const Setup &s, int index, int ready_fd, int go_fd, int result_fd,
                                 double seconds) {
  ClientResult r;
  try {
    rfaas::resource_manager rm(s.device, s.address, "bench-" + std::to_string(index), patient());
    char one = 'r';
    if (write(ready_fd, &one, 1) != 1)
      _exit(1);
    // The parent closes the go pipe: every client starts at the same moment.
    char c;
    while (read(go_fd, &c, 1) > 0) {
    }
    std::vector<double> lease_us;
    lease_us.reserve(1 << 16);
    const Clock::time_point start = Clock::now();
    const auto end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    Clock::time_point now = start;
    while (now < end) {
      try {
        Clock::time_point t0 = Clock::now();
        rfaas::lease l = rm.lease(s.cores, s.memory_mib, s.duration);
        Clock::time_point t1 = Clock::now();
        if (lease_us.size() < lease_us.capacity())
          lease_us.push_back(us_between(t0, t1));
        rm.release(l);
        ++r.granted;
      } catch (const rfaas::Error &e) {
        if (e.code() == rfaas::status::resources_unavailable) {
          ++r.refused;
        } else {
          ++r.errors;
          if (!r.error[0])
            std::snprintf(r.error, sizeof r.error, "%s", e.what());
          if (e.code() == rfaas::status::closed || e.code() == rfaas::status::network_error)
            break; // the connection is gone: nothing more to measure
        }
      }
      now = Clock::now();
    }
    r.seconds = us_between(start, now) / 1e6;
    r.lease_median_us = stats_of(lease_us).median;
  } catch (const std::exception &e) {
    ++r.errors;
    std::snprintf(r.error, sizeof r.error, "%s", e.what());
  }
  ssize_t n = write(result_fd, &r, sizeof r);
  _exit(n == static_cast<ssize_t>(sizeof r) ? 0 : 1);
}

int run_throughput(const Setup &s, int clients, double seconds) {
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::vector<pid_t> pids;
  std::vector<int> results;
  const pid_t parent = getpid();
  for (int i = 0; i < clients; ++i) {
    int res[2];
    if (pipe(res) != 0)
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
      throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent)
        _exit(1);
      close(ready[0]);
      close(go[1]);
      close(res[0]);
      for (int fd : results)
        close(fd);
      client_process(s, i, ready[1], go[0], res[1], seconds);
    }
    close(res[1]);
    results.push_back(res[0]);
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  // Every client connected (or died trying) before the clock starts.
  int connected = 0;
  char c;
  while (connected < clients && read_full(ready[0], &c, 1, 60000))
    ++connected;
  close(ready[0]);
  close(go[1]); // go
  std::vector<ClientResult> rs(static_cast<size_t>(clients));
  int missing = 0;
  const int wait_ms = static_cast<int>(seconds * 1000) + 60000;
  for (int i = 0; i < clients; ++i) {
    if (!read_full(results[static_cast<size_t>(i)], &rs[static_cast<size_t>(i)],
                   sizeof(ClientResult), wait_ms)) {
      ++missing;
      kill(pids[static_cast<size_t>(i)], SIGKILL);
    }
    close(results[static_cast<size_t>(i)]);
  }
  for (pid_t pid : pids)
    waitpid(pid, nullptr, 0);

  uint64_t granted = 0, refused = 0, errors = 0;
  double longest = 0;
  std::vector<double> medians;
  for (const ClientResult &r : rs) {
    granted += r.granted;
    refused += r.refused;
    errors += r.errors;
    longest = std::max(longest, r.seconds);
    if (r.granted)
      medians.push_back(r.lease_median_us);
    if (r.error[0])
      std::fprintf(stderr, "rm_lease_benchmark: client error: %s\n", r.error);
  }
  const double per_s = longest > 0 ? static_cast<double>(granted) / longest : 0;
  const double req_s = longest > 0 ? static_cast<double>(granted + refused) / longest : 0;
  const double median = stats_of(medians).median;
  std::printf("%-8s %10s %10s %8s %12s %14s %18s\n", "clients", "leases", "refused", "errors",
              "leases_per_s", "requests_per_s", "lease_median_us");
  std::printf("%-8d %10llu %10llu %8llu %12.0f %14.0f %18.1f\n", clients,
              static_cast<unsigned long long>(granted), static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(errors), per_s, req_s, median);
  char line[256];
  std::snprintf(line, sizeof line, "throughput,%s,%d,%.3f,%llu,%llu,%llu,%.1f,%.1f,%.3f",
                s.device.name.c_str(), clients, longest, static_cast<unsigned long long>(granted),
                static_cast<unsigned long long>(refused), static_cast<unsigned long long>(errors),
                per_s, req_s, median);
  append_csv(s.csv,
             "benchmark,device,clients,seconds,leases,refused,errors,leases_per_s,requests_per_s,"
             "lease_median_us",
             line);
  if (missing || connected < clients) {
    std::fprintf(stderr, "rm_lease_benchmark: %d of %d clients connected, %d sent no result\n",
                 connected, clients, missing);
    return 1;
  }
  return errors == 0 && granted > 0 ? 0 : 1;
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
