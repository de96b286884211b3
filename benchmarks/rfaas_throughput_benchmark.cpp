// rfaas_throughput_benchmark: pipelined asynchronous invocations per second
// through librfaas (executor::async), the figure compared with the raw
// libfabric message rate (raw_libfabric_msgrate --pattern echo) by
// run-throughput.sh.
//
// Each client process leases --workers cores with --window input slots per
// worker and keeps workers x window invocations of `echo` outstanding: as soon
// as the oldest future's result is in (and verified: status, size and the
// sequence number stamped into the input), the next invocation takes its slot.
// Inputs are registered memory (rfaas::allocator, zero copy), one buffer per
// outstanding invocation. With --clients N the program forks N clients before
// any network is opened; each allocates on the same manager, they start each
// measurement together (a barrier through pipes, outside the timed loop), and
// the aggregate is all invocations over the span from the first start to the
// last end (steady_clock is CLOCK_MONOTONIC, common to the processes).
#include "rfaas_common.hpp"

#include <chrono>
#include <csignal>
#include <cstring>
#include <future>
#include <sstream>

#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "options.hpp"

/// Named once: the hot loops pass the hash, not the name (rfaas/function_name.hpp).
static constexpr rfaas::function_name kEcho("echo");

namespace {

using Clock = std::chrono::steady_clock;

struct Params {
  std::vector<size_t> sizes;
  uint32_t workers = 1;
  uint32_t window = 8;
  uint32_t clients = 1;
  size_t iters = 2000000;
  size_t warmup = 0;
  double budget_s = 1.0;
  int32_t hot_timeout_ms = -1;
  int timeout_s = 120;
};

/// One client's measurement of one size.
struct ClientRow {
  size_t size = 0;
  uint64_t ops = 0;
  int64_t t0_ns = 0, t1_ns = 0; // steady_clock since its epoch
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

/// A line-oriented pipe between the parent and one client, with a deadline.
class Pipe {
public:
  Pipe() = default;
  Pipe(int rd, int wr) : rd_(rd), wr_(wr) {}
  void send(const std::string &line) {
    std::string s = line + "\n";
    const char *p = s.data();
    size_t left = s.size();
    while (left > 0) {
      ssize_t n = ::write(wr_, p, left);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw std::runtime_error("the other process went away (pipe closed)");
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  /// The next line; throws when the peer closed or the deadline passed.
  std::string recv(Clock::time_point deadline, const char *what) {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        throw std::runtime_error(std::string("timed out waiting for ") + what);
      pollfd pfd{rd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
      if (r < 0 && errno != EINTR)
        throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      if (r <= 0)
        continue;
      char chunk[4096];
      ssize_t n = ::read(rd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        throw std::runtime_error(std::string("the other process ended while we waited for ") +
                                 what);
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

private:
  int rd_ = -1, wr_ = -1;
  std::string buf_;
};

/// The client: allocate, then per size warm up, meet the others, measure.
/// Reports "net <describe_network()>" once, then "ready" / "row ..." per size.
int client_main(const rfaas::cli::ParseResult &args, const Params &p, Pipe &parent) {
  const auto deadline = [&] { return Clock::now() + std::chrono::seconds(p.timeout_s); };
  rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                          .find(args["device"].as<std::string>());
  rfaas::executor ex(dev);
  rfaas::allocation_options o;
  o.cores = p.workers;
  o.slots = p.window;
  o.library = args["library"].as<std::string>();
  o.hot_timeout_ms = p.hot_timeout_ms;
  const size_t largest = *std::max_element(p.sizes.begin(), p.sizes.end());
  o.max_input_size = static_cast<uint32_t>(std::max<size_t>(largest, 8));
  o.max_output_size = o.max_input_size;
  ex.allocate(rfaas::bench::parse_manager(args["manager"].as<std::string>()), o);
  rfaas::bench::settle(args);
  parent.send("net " + ex.describe_network());

  const size_t depth = size_t(p.workers) * p.window;
  using Input = std::vector<uint8_t, rfaas::allocator<uint8_t>>;
  std::vector<Input> in;
  std::vector<std::vector<uint8_t>> out(depth, std::vector<uint8_t>(o.max_output_size));
  for (size_t k = 0; k < depth; ++k)
    in.emplace_back(o.max_input_size, uint8_t(0x5A), rfaas::allocator<uint8_t>(ex));
  std::vector<rfaas::async_result> ring(depth);
  std::vector<uint64_t> stamp(depth);
  uint64_t seq = 0;

  for (size_t size : p.sizes) {
    const size_t stamp_bytes = std::min<size_t>(size, sizeof(uint64_t));
    auto issue = [&](size_t k) {
      stamp[k] = ++seq;
      std::memcpy(in[k].data(), &stamp[k], stamp_bytes);
      ring[k] = ex.async(kEcho, rfaas::const_buffer(in[k].data(), size),
                         rfaas::mutable_buffer(out[k].data(), out[k].size()));
    };
    auto reap = [&](size_t k) {
      rfaas::result r = ring[k].get();
      if (!r.ok())
        throw std::runtime_error(std::string("invocation failed: ") + rfaas::to_string(r.status) +
                                 " (detail " + std::to_string(r.detail) + ")");
      if (r.output_size != size || std::memcmp(out[k].data(), &stamp[k], stamp_bytes) != 0)
        throw std::runtime_error("echo of " + std::to_string(size) +
                                 " B returned the wrong output (size " +
                                 std::to_string(r.output_size) + ")");
    };
    // Runs until `stop` says so (checked every 64 completions), then drains.
    auto run = [&](auto stop) {
      uint64_t done = 0;
      for (size_t k = 0; k < depth; ++k)
        issue(k);
      bool stopping = false;
      size_t k = 0, outstanding = depth;
      while (outstanding > 0) {
        reap(k);
        ++done;
        --outstanding;
        if (!stopping && (done & 63) == 0)
          stopping = stop(done + outstanding);
        if (!stopping) {
          issue(k);
          ++outstanding;
        }
        k = (k + 1) % depth;
      }
      return done;
    };
    const size_t warm = p.warmup ? p.warmup : std::max<size_t>(1000, 20 * depth);
    run([&](uint64_t issued) { return issued >= warm; });
    parent.send("ready");
    if (parent.recv(deadline(), "the start signal") != "go")
      throw std::runtime_error("unexpected message from the parent");
    const int64_t t0 = now_ns();
    const auto until = Clock::now() + std::chrono::duration<double>(p.budget_s);
    uint64_t ops = run([&](uint64_t issued) {
      return issued >= p.iters || (p.budget_s > 0 && issued >= 1000 && Clock::now() > until);
    });
    const int64_t t1 = now_ns();
    parent.send("row " + std::to_string(size) + " " + std::to_string(ops) + " " +
                std::to_string(t0) + " " + std::to_string(t1));
  }
  ex.deallocate();
  return 0;
}

struct Child {
  pid_t pid = -1;
  Pipe pipe;
};

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rfaas_throughput_benchmark",
                          "Pipelined asynchronous invocations per second through librfaas (echo).");
  rfaas::bench::add_common_options(cli);
  rfaas::bench::add_settle_option(cli);
  // clang-format off
  cli.add_options()
    ("s,sizes", "payload sizes (suffix K, M)", rfaas::cli::value<std::string>()->default_value("8"))
    ("workers", "cores leased by each client", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("window", "input slots per worker = invocations outstanding per worker", rfaas::cli::value<uint32_t>()->default_value("8"))
    ("clients", "client processes, each with its own lease", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("n,iters", "at most this many invocations per client and size", rfaas::cli::value<size_t>()->default_value("2000000"))
    ("w,warmup", "unmeasured invocations first (0 = max(1000, 20 x outstanding))", rfaas::cli::value<size_t>()->default_value("0"))
    ("b,budget", "seconds per size (measuring stops after it, once 1000 are in; 0 = never)", rfaas::cli::value<double>()->default_value("1"))
    ("hot-timeout", "worker hot-polling ms: -1 always hot, 0 never", rfaas::cli::value<int32_t>()->default_value("-1"))
    ("t,timeout", "seconds any one step may take before the run fails", rfaas::cli::value<int>()->default_value("120"));
  // clang-format on
  rfaas::cli::ParseResult args;
  int status = 0;
  if (!rfaas::bench::parse_or_usage(cli, argc, argv, args, status))
    return status;
  Params p;
  try {
    p.sizes = rfaas::bench::parse_sizes(args["sizes"].as<std::string>());
    p.workers = args["workers"].as<uint32_t>();
    p.window = args["window"].as<uint32_t>();
    p.clients = args["clients"].as<uint32_t>();
    p.iters = args["iters"].as<size_t>();
    p.warmup = args["warmup"].as<size_t>();
    p.budget_s = args["budget"].as<double>();
    p.hot_timeout_ms = args["hot-timeout"].as<int32_t>();
    p.timeout_s = args["timeout"].as<int>();
    if (p.sizes.empty() || p.workers == 0 || p.window == 0 || p.clients == 0 || p.clients > 64 ||
        p.timeout_s <= 0 || p.budget_s < 0)
      throw rfaas::cli::UsageError("--sizes, --workers, --window, --clients (1..64) and --timeout "
                                   "must be positive");
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rfaas_throughput_benchmark: %s (see --help)\n", e.what());
    return rfaas::cli::kUsage;
  }

  // Clients are processes, forked before any network library is opened.
  std::vector<Child> children(p.clients);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent_pid = ::getpid();
  for (uint32_t i = 0; i < p.clients; ++i) {
    int up[2], down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) {
      std::perror("rfaas_throughput_benchmark: pipe");
      return 1;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("rfaas_throughput_benchmark: fork");
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent_pid)
        std::_Exit(3);
      ::close(up[0]);
      ::close(down[1]);
      Pipe parent(down[0], up[1]);
      int rc = 1;
      try {
        rc = client_main(args, p, parent);
      } catch (const std::exception &e) {
        std::fprintf(stderr, "rfaas_throughput_benchmark: client %u: %s\n", i, e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(rc);
    }
    ::close(up[1]);
    ::close(down[0]);
    children[i].pid = pid;
    children[i].pipe = Pipe(up[0], down[1]);
  }

  auto kill_all = [&] {
    for (Child &c : children)
      if (c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.pid = -1;
      }
  };
  try {
    const auto deadline = [&] { return Clock::now() + std::chrono::seconds(p.timeout_s); };
    std::string network;
    for (Child &c : children) {
      std::string line = c.pipe.recv(deadline(), "a client's allocation");
      if (line.rfind("net ", 0) != 0)
        throw std::runtime_error("a client said \"" + line + "\" instead of its network");
      network = line.substr(4);
    }
    rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
    const std::string provider = rfaas::bench::network_field(network, "provider");
    std::printf("# rfaas_throughput_benchmark device=%s provider=%s clients=%u workers=%u "
                "window=%u hot_timeout_ms=%d\n",
                dev.name.c_str(), provider.c_str(), p.clients, p.workers, p.window,
                p.hot_timeout_ms);
    std::printf("%-8s %9s %7s %7s %6s %10s %9s %13s %13s\n", "pattern", "size", "clients",
                "workers", "window", "ops", "seconds", "ops_per_s", "per_client");
    bench_json::Value doc =
        rfaas::bench::document("rfaas_throughput_benchmark", argc, argv, dev, network, args);
    bench_json::Value &par = doc["parameters"];
    par["clients"] = p.clients;
    par["workers"] = p.workers;
    par["window"] = p.window;
    par["hot_timeout_ms"] = p.hot_timeout_ms;
    par["iters"] = p.iters;
    par["budget_s"] = p.budget_s;
    std::ofstream csv;
    const std::string csv_path = args["csv"].as<std::string>();
    if (!csv_path.empty()) {
      bool fresh = true;
      {
        std::ifstream probe(csv_path);
        fresh = !probe.good() || probe.peek() == std::ifstream::traits_type::eof();
      }
      csv.open(csv_path, std::ios::app);
      if (!csv)
        throw std::runtime_error("cannot open " + csv_path + " for writing");
      if (fresh)
        csv << "impl,provider,endpoint,wait,pattern,size,window,clients,workers,ops,seconds,"
               "ops_per_s\n";
    }
    for (size_t size : p.sizes) {
      for (Child &c : children)
        if (c.pipe.recv(deadline(), "a client to warm up") != "ready")
          throw std::runtime_error("a client did not report ready");
      for (Child &c : children)
        c.pipe.send("go");
      uint64_t ops = 0;
      int64_t first = INT64_MAX, last = INT64_MIN;
      double per_client = 0;
      for (Child &c : children) {
        std::istringstream row(c.pipe.recv(deadline(), "a client's measurement"));
        std::string tag;
        ClientRow r;
        row >> tag >> r.size >> r.ops >> r.t0_ns >> r.t1_ns;
        if (tag != "row" || !row || r.size != size)
          throw std::runtime_error("a client's measurement could not be read");
        ops += r.ops;
        first = std::min(first, r.t0_ns);
        last = std::max(last, r.t1_ns);
        per_client += static_cast<double>(r.ops) / (static_cast<double>(r.t1_ns - r.t0_ns) / 1e9);
      }
      const double seconds = static_cast<double>(last - first) / 1e9;
      const double rate = seconds > 0 ? static_cast<double>(ops) / seconds : 0;
      per_client /= p.clients;
      std::printf("%-8s %9zu %7u %7u %6u %10llu %9.3f %13.0f %13.0f\n", "async", size, p.clients,
                  p.workers, p.window, static_cast<unsigned long long>(ops), seconds, rate,
                  per_client);
      std::fflush(stdout);
      const std::string wait = "hot" + std::to_string(p.hot_timeout_ms);
      if (csv.is_open())
        csv << "rfaas,\"" << provider << "\"," << rfaas::bench::network_field(network, "endpoint")
            << "," << wait << ",async," << size << "," << p.window << "," << p.clients << ","
            << p.workers << "," << ops << "," << seconds << "," << rate << "\n"
            << std::flush;
      bench_json::Value v = bench_json::Value::object();
      v["kind"] = "rate";
      v["impl"] = "rfaas";
      v["pattern"] = "async";
      v["size"] = size;
      v["window"] = p.window;
      v["clients"] = p.clients;
      v["workers"] = p.workers;
      v["ops"] = ops;
      v["seconds"] = seconds;
      v["ops_per_s"] = rate;
      v["per_client_ops_per_s"] = per_client;
      doc["results"].push(std::move(v));
    }
    int failed = 0;
    for (Child &c : children) {
      int st = 0;
      ::waitpid(c.pid, &st, 0);
      c.pid = -1;
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        ++failed;
    }
    if (failed)
      throw std::runtime_error(std::to_string(failed) + " client(s) failed at the end");
    rfaas::bench::write_json(args, doc);
  } catch (const std::exception &e) {
    kill_all();
    std::fprintf(stderr, "rfaas_throughput_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
