// What the librfaas benchmarks share: the manager address, statistics and the
// CSV row shape of the ping-pong benchmarks (so one driver can join them).
#pragma once

#include <rfaas/rfaas.hpp>

#include <rdmalib/fabric.hpp>

#include "options.hpp"

#include "bench_json.hpp"
#include "cli.hpp"
#include "stats.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace rfaas::bench {

/// The options every librfaas benchmark takes: where the manager is and what
/// to ship. The caller adds its own and then calls parse_or_usage().
inline void add_common_options(rfaas::cli::Options &cli) {
  // clang-format off
  cli.add_options()
    ("devices", "device database", rfaas::cli::value<std::string>()->default_value("config/devices.json"))
    ("device", "device entry", rfaas::cli::value<std::string>()->default_value("lo-tcp"))
    ("manager", "executor manager address as it prints it (host:port or ofi:...)",
     rfaas::cli::value<std::string>())
    ("library", "function library (libfunctions.so)", rfaas::cli::value<std::string>())
    ("csv", "append CSV rows to this file", rfaas::cli::value<std::string>()->default_value(""))
    ("json", "write the run (metadata, parameters, results) as JSON to this file",
     rfaas::cli::value<std::string>()->default_value(""));
  // clang-format on
  rfaas::cli::add_standard_options(cli);
}

/// --settle-ms, for the benchmarks that measure a hot allocation.
inline void add_settle_option(rfaas::cli::Options &cli) {
  // clang-format off
  cli.add_options()
    ("settle-ms", "pause after the allocation before measuring, so that the background work it "
     "starts is not measured (0 = none)", rfaas::cli::value<uint32_t>()->default_value("1000"));
  // clang-format on
}

/// Waits --settle-ms after an allocation. An allocation starts work that
/// finishes behind it: about 100 ms after their endpoints were taken, the
/// client and the manager open the next ones ahead and the zygote forks the
/// next spare executor (docs/rdmalib.md, Fabric::prepare). On shm each such
/// endpoint is a 16 MiB region to fill, milliseconds of a core; on a 2-core
/// host it preempts the pinned, busy-polling client or worker, and the
/// invocations it lands on take milliseconds. A hot-invocation figure is
/// taken after that; the cold benchmark measures the allocation itself.
inline void settle(const rfaas::cli::ParseResult &args) {
  const uint32_t ms = args["settle-ms"].as<uint32_t>();
  if (ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

/// Parses the command line and applies --log-level; answers --help and
/// --version. Returns false (setting `status`: 0 after --help or --version, 2
/// for a usage error, reported on stderr) when the benchmark should not run.
inline bool parse_or_usage(rfaas::cli::Options &cli, int argc, char **argv,
                           rfaas::cli::ParseResult &args, int &status) {
  const std::string program = argc > 0 ? argv[0] : "benchmark";
  try {
    args = cli.parse(argc, argv);
    if (args.count("help")) {
      std::printf("%s", cli.help().c_str());
      status = rfaas::cli::kSuccess;
      return false;
    }
    if (args.count("version")) {
      std::printf("%s\n", rfaas::cli::version_text(program.substr(program.rfind('/') + 1)).c_str());
      status = rfaas::cli::kSuccess;
      return false;
    }
    if (!args.count("manager") || !args.count("library"))
      throw rfaas::cli::UsageError("--manager HOST:PORT and --library FILE are required");
    rfaas::cli::apply_log_level(args);
    return true;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program.c_str(), e.what());
    status = rfaas::cli::kUsage;
    return false;
  }
}

/// --manager: the address an executor_manager prints (host:port, or its
/// opaque ofi: name where endpoints are not named by IP).
inline rfaas::server parse_manager(const std::string &address) {
  return rfaas::server::parse(address);
}

/// "8,1K,64K,1M" -> bytes.
inline std::vector<size_t> parse_sizes(const std::string &list) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    std::string tok =
        list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? list.size() : comma + 1;
    if (tok.empty())
      continue;
    size_t mult = 1;
    char last = tok.back();
    if (last == 'K' || last == 'k')
      mult = 1024;
    else if (last == 'M' || last == 'm')
      mult = 1024 * 1024;
    if (mult != 1)
      tok.pop_back();
    out.push_back(std::stoul(tok) * mult);
  }
  return out;
}

struct Stats {
  size_t n = 0;
  double median = 0, p99 = 0, min = 0, mean = 0;
  bench_json::Value cdf{};
};

inline Stats stats(std::vector<double> v) {
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
  s.cdf = bench_json::cdf(v);
  return s;
}

/// `key=value` out of describe_network()'s text ("provider=tcp endpoint=...").
inline std::string network_field(const std::string &described, const std::string &key) {
  size_t at = described.find(key + "=");
  if (at == std::string::npos)
    return "";
  at += key.size() + 1;
  size_t end = described.find_first_of(" ,", at);
  return described.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

/// The JSON document of a librfaas benchmark: metadata from the network the
/// executor opened (`described`: executor::describe_network()), the device
/// entry, and the common options; the caller adds its parameters and results.
inline bench_json::Value document(const std::string &program, int argc, char **argv,
                                  const rfaas::device &dev, const std::string &described,
                                  const rfaas::cli::ParseResult &args) {
  std::string provider = network_field(described, "provider");
  if (provider.empty())
    provider = dev.provider;
  std::string backend_version;
  try {
    backend_version = rdmalib::Fabric::backend_version();
  } catch (const std::exception &e) {
    backend_version = std::string("unknown: ") + e.what();
  }
  bench_json::Value doc =
      bench_json::document({program, rdmalib::Fabric::backend_name(), backend_version, provider,
                            network_field(described, "endpoint"), bench_json::args_of(argc, argv)});
  doc["metadata"]["network"] = described;
  bench_json::Value &p = doc["parameters"];
  p["device"] = dev.name;
  p["manager"] = args["manager"].as<std::string>();
  p["library"] = args["library"].as<std::string>();
  return doc;
}

/// A latency row of the JSON document.
inline bench_json::Value latency_result(const std::string &mode, size_t size, const Stats &s) {
  bench_json::Value v = bench_json::Value::object();
  v["kind"] = "latency";
  v["impl"] = "rfaas";
  v["mode"] = mode;
  v["size"] = size;
  v["iters"] = s.n;
  v["median_us"] = s.median;
  v["p99_us"] = s.p99;
  v["min_us"] = s.min;
  v["mean_us"] = s.mean;
  v["cdf"] = s.cdf;
  return v;
}

/// Write `doc` when --json was given.
inline void write_json(const rfaas::cli::ParseResult &args, const bench_json::Value &doc) {
  const std::string path = args["json"].as<std::string>();
  if (!path.empty())
    bench_json::write(path, doc);
}

/// Append rows in the ping-pong CSV shape:
/// impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,min_us,mean_us
class Csv {
public:
  explicit Csv(const std::string &path) : path_(path) {
    if (path_.empty())
      return;
    std::ifstream in(path_);
    bool fresh = !in.good() || in.peek() == std::ifstream::traits_type::eof();
    out_.open(path_, std::ios::app);
    if (!out_)
      throw std::runtime_error("cannot open " + path_ + " for writing");
    if (fresh)
      out_ << "impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,min_us,mean_us\n";
  }
  void row(const std::string &impl, const std::string &provider, const std::string &wait,
           const std::string &mode, size_t size, const Stats &s) {
    if (path_.empty())
      return;
    char line[512];
    std::snprintf(line, sizeof line, "%s,\"%s\",-,%s,%s,%zu,%zu,%.3f,%.3f,%.3f,%.3f\n",
                  impl.c_str(), provider.c_str(), wait.c_str(), mode.c_str(), size, s.n, s.median,
                  s.p99, s.min, s.mean);
    out_ << line << std::flush;
  }

private:
  std::string path_;
  std::ofstream out_;
};

} // namespace rfaas::bench
