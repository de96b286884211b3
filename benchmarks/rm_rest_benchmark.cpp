// rm_rest_benchmark: the REST API of a running resource manager under load
// (GET only: nothing is changed).
//
//   rest:  GETs per second from --threads 1,4 threads, each with one client
//          (tools/http), per path, in two ways in the same run: kept-alive
//          connections (one per thread) and, as the baseline, a new TCP
//          connection per request ("Connection: close"). Prints requests per
//          second, p50 and p99 of one request, and connections opened.
//   mixed: --clients leasing processes at full rate (lease_load.hpp) while one
//          thread polls /metrics and /nodes on a kept-alive connection; three
//          phases of --seconds each: leasing alone, polling alone, both at
//          once. Prints leases per second and the two endpoints' p50 and p99
//          in each, so that what each load costs the other shows.
//
//   rm_rest_benchmark --port 8080 --token-file tok --paths /health,/nodes --threads 1,4
//   rm_rest_benchmark --port 8080 --token-file tok --mode mixed --device lo-tcp
//     --resource-manager 127.0.0.1:10100 --clients 16
//
// Every answer is checked: a status other than 200, no answer within the
// deadline, or a body that is not what the path returns (a JSON array for
// /nodes, the lease counter in /metrics, "ok" from /health) counts as an
// error, and the run fails (exit 1) with the first one printed.
#include "http_client.hpp"
#include "lease_load.hpp"
#include "stats.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"

#include "cli.hpp"
#include "count_list.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Target {
  std::string host;
  uint16_t port = 0;
  /// Bearer token (reads of /nodes, /leases and /accounting need one).
  std::string token;
  std::string csv;
};

/// Whether `body` is what `path` answers; a reason when not.
std::string implausible(const std::string &path, const std::string &body) {
  auto starts = [&](const char *p) { return body.compare(0, std::strlen(p), p) == 0; };
  if (path == "/nodes" || path.compare(0, 7, "/leases") == 0)
    return starts("[") ? "" : "not a JSON array";
  if (path == "/metrics")
    return body.find("\nrfaas_rm_leases_granted_total ") != std::string::npos
               ? ""
               : "no rfaas_rm_leases_granted_total";
  if (path == "/health")
    return body.find("\"status\":\"ok\"") != std::string::npos ? "" : "no \"status\":\"ok\"";
  return body.empty() ? "an empty body" : "";
}

/// Requests of one kind, from one or more threads.
struct Sample {
  uint64_t ok = 0;
  uint64_t errors = 0;
  uint64_t connections = 0;
  std::vector<double> us;
  std::string error;

  void add(const Sample &o) {
    ok += o.ok;
    errors += o.errors;
    connections += o.connections;
    us.insert(us.end(), o.us.begin(), o.us.end());
    if (error.empty())
      error = o.error;
  }
  double p50() {
    std::sort(us.begin(), us.end());
    return bench_stats::median_sorted(us);
  }
  double p99() {
    std::sort(us.begin(), us.end());
    return bench_stats::percentile_sorted(us, 0.99);
  }
};

/// One GET, timed and checked, into `s`.
void timed_get(rfaas::http::Client &c, const std::string &path, Sample &s) {
  const Clock::time_point t0 = Clock::now();
  std::string why;
  try {
    rfaas::http::Response r = c.get(path);
    if (r.status != 200)
      why =
          "status " + std::to_string(r.status) + " for GET " + path + ": " + r.body.substr(0, 200);
    else if (std::string bad = implausible(path, r.body); !bad.empty())
      why = "GET " + path + ": " + bad + ": " + r.body.substr(0, 200);
  } catch (const std::exception &e) {
    why = e.what();
  }
  if (why.empty()) {
    ++s.ok;
    if (s.us.size() < s.us.capacity())
      s.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  } else {
    ++s.errors;
    if (s.error.empty())
      s.error = why;
  }
}

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

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

bool report_errors(const Sample &s, const std::string &what) {
  if (!s.errors)
    return false;
  std::fprintf(stderr, "rm_rest_benchmark: %s: %llu failed request(s), the first: %s\n",
               what.c_str(), static_cast<unsigned long long>(s.errors), s.error.c_str());
  return true;
}

// ---- rest: GETs per second -----------------------------------------------------------

int run_rest(const Target &t, const std::string &path, bool keep_alive, int threads,
             double seconds) {
  std::vector<Sample> per(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  // A common start a little ahead, so that thread creation is not measured.
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < threads; ++i)
    workers.emplace_back([&, i] {
      Sample &s = per[static_cast<size_t>(i)];
      s.us.reserve(1 << 18);
      rfaas::http::Client c(t.host, t.port);
      c.set_keep_alive(keep_alive);
      c.set_token(t.token);
      std::this_thread::sleep_until(start);
      while (Clock::now() < end && s.errors < 100) // past 100 errors the server is gone
        timed_get(c, path, s);
      s.connections = c.connections_opened();
    });
  for (std::thread &w : workers)
    w.join();
  const double elapsed = std::chrono::duration<double>(std::max(Clock::now(), end) - start).count();
  Sample all;
  for (const Sample &s : per)
    all.add(s);
  const char *mode = keep_alive ? "keep-alive" : "new";
  const double per_s = static_cast<double>(all.ok) / elapsed;
  const double p50 = all.p50(), p99 = all.p99();
  std::printf("%-11s %-9s %7d %9llu %7llu %11llu %14.0f %9.1f %9.1f\n", mode, path.c_str(), threads,
              static_cast<unsigned long long>(all.ok), static_cast<unsigned long long>(all.errors),
              static_cast<unsigned long long>(all.connections), per_s, p50, p99);
  std::fflush(stdout);
  char line[512];
  std::snprintf(line, sizeof line, "rest,%s,%s,%d,%.3f,%llu,%llu,%llu,%.1f,%.3f,%.3f", path.c_str(),
                mode, threads, elapsed, static_cast<unsigned long long>(all.ok),
                static_cast<unsigned long long>(all.errors),
                static_cast<unsigned long long>(all.connections), per_s, p50, p99);
  append_csv(t.csv,
             "benchmark,path,connection,threads,seconds,requests,errors,connections,requests_per_s,"
             "p50_us,p99_us",
             line);
  return report_errors(all, std::string(mode) + " GET " + path) || all.ok == 0 ? 1 : 0;
}

// ---- mixed: leasing clients and a REST poller -------------------------------------

/// One thread's polls of /metrics and /nodes, alternately, until `end`.
struct Poll {
  Sample metrics, nodes;
};

void poll_rest(const Target &t, Clock::time_point end, Poll &out) {
  out.metrics.us.reserve(1 << 17);
  out.nodes.us.reserve(1 << 17);
  rfaas::http::Client c(t.host, t.port);
  c.set_token(t.token);
  while (Clock::now() < end && out.metrics.errors + out.nodes.errors < 100) {
    timed_get(c, "/metrics", out.metrics);
    timed_get(c, "/nodes", out.nodes);
  }
  out.metrics.connections = c.connections_opened();
}

/// The resource manager's own histogram of REST reads (handler start to
/// answer sent: the wait for its loop included, the network and the wait for
/// a pistache thread not): how many took over 1 ms and over 10 ms.
struct ServerReads {
  double count = 0, over_1ms = 0, over_10ms = 0;

  static double value(const std::string &text, const std::string &series) {
    size_t at = text.find(series + " ");
    return at == std::string::npos ? -1
                                   : std::strtod(text.c_str() + at + series.size() + 1, nullptr);
  }
  /// From a /metrics page; all -1 when the series are missing.
  static ServerReads of(const std::string &metrics) {
    const std::string h = "rfaas_rm_request_duration_seconds";
    const std::string l = "{interface=\"http\",kind=\"read\"";
    ServerReads r;
    r.count = value(metrics, h + "_count" + l + "}");
    const double le1 = value(metrics, h + "_bucket" + l + ",le=\"0.001\"}");
    const double le10 = value(metrics, h + "_bucket" + l + ",le=\"0.01\"}");
    r.over_1ms = r.count - le1;
    r.over_10ms = r.count - le10;
    return r;
  }
  ServerReads operator-(const ServerReads &o) const {
    return {count - o.count, over_1ms - o.over_1ms, over_10ms - o.over_10ms};
  }
};

ServerReads server_reads(const Target &t) {
  rfaas::http::Client c(t.host, t.port);
  c.set_token(t.token);
  return ServerReads::of(c.get("/metrics").body);
}

int run_mixed(const Target &t, const rfaas::bench::LeaseLoad &load, int clients, double seconds) {
  struct Phase {
    const char *name;
    bool leases, rest;
    rfaas::bench::LeaseLoadResult lease;
    Poll poll;
    ServerReads server;
  };
  std::vector<Phase> phases = {{"leases", true, false, {}, {}, {}},
                               {"rest", false, true, {}, {}, {}},
                               {"both", true, true, {}, {}, {}}};
  int rc = 0;
  for (Phase &p : phases) {
    const ServerReads before = server_reads(t);
    if (p.leases) {
      std::function<void(Clock::time_point)> alongside;
      if (p.rest)
        alongside = [&](Clock::time_point end) { poll_rest(t, end, p.poll); };
      p.lease = rfaas::bench::run_lease_load(load, clients, seconds, alongside);
      for (const std::string &m : p.lease.messages)
        std::fprintf(stderr, "rm_rest_benchmark: leasing client error: %s\n", m.c_str());
      if (!p.lease.ok()) {
        std::fprintf(stderr,
                     "rm_rest_benchmark: phase %s: %d of %d clients connected, %d sent no "
                     "result, %llu errors, %llu leases\n",
                     p.name, p.lease.connected, clients, p.lease.missing,
                     static_cast<unsigned long long>(p.lease.errors),
                     static_cast<unsigned long long>(p.lease.granted));
        rc = 1;
      }
    } else {
      poll_rest(t, after(seconds), p.poll);
    }
    p.server = server_reads(t) - before;
    if (p.rest && (report_errors(p.poll.metrics, std::string("phase ") + p.name + ", /metrics") ||
                   report_errors(p.poll.nodes, std::string("phase ") + p.name + ", /nodes") ||
                   p.poll.metrics.ok == 0 || p.poll.nodes.ok == 0))
      rc = 1;
  }
  std::printf("%d leasing clients, one thread polling GET /metrics and GET /nodes (kept alive)\n",
              clients);
  std::printf("(srv_over_1ms, srv_over_10ms: of the REST reads in the phase, the share whose "
              "handler took that long in the resource manager's own histogram, its loop's "
              "answer included)\n");
  std::printf("%-7s %12s %16s %9s %12s %12s %9s %12s %12s %12s %13s\n", "phase", "leases_per_s",
              "lease_median_us", "metrics_n", "metrics_p50", "metrics_p99", "nodes_n",
              "nodes_p50_us", "nodes_p99_us", "srv_over_1ms", "srv_over_10ms");
  for (Phase &p : phases) {
    const double m50 = p.poll.metrics.p50(), m99 = p.poll.metrics.p99();
    const double n50 = p.poll.nodes.p50(), n99 = p.poll.nodes.p99();
    const double n = p.server.count > 0 ? p.server.count : 1;
    const double over1 = 100 * p.server.over_1ms / n, over10 = 100 * p.server.over_10ms / n;
    std::printf("%-7s %12.0f %16.1f %9llu %12.1f %12.1f %9llu %12.1f %12.1f %11.2f%% %12.2f%%\n",
                p.name, p.lease.leases_per_s(), p.lease.lease_median_us,
                static_cast<unsigned long long>(p.poll.metrics.ok), m50, m99,
                static_cast<unsigned long long>(p.poll.nodes.ok), n50, n99, over1, over10);
    char line[512];
    std::snprintf(
        line, sizeof line,
        "mixed,%s,%d,%.3f,%llu,%llu,%llu,%.1f,%.3f,%llu,%.3f,%.3f,%llu,%.3f,%.3f,%.3f,%.3f", p.name,
        clients, p.lease.seconds, static_cast<unsigned long long>(p.lease.granted),
        static_cast<unsigned long long>(p.lease.refused),
        static_cast<unsigned long long>(p.lease.errors), p.lease.leases_per_s(),
        p.lease.lease_median_us, static_cast<unsigned long long>(p.poll.metrics.ok), m50, m99,
        static_cast<unsigned long long>(p.poll.nodes.ok), n50, n99, over1, over10);
    append_csv(t.csv,
               "benchmark,phase,clients,seconds,leases,refused,errors,leases_per_s,"
               "lease_median_us,metrics_requests,metrics_p50_us,metrics_p99_us,nodes_requests,"
               "nodes_p50_us,nodes_p99_us,server_over_1ms_pct,server_over_10ms_pct",
               line);
  }
  return rc;
}

std::vector<std::string> split(const std::string &list) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= list.size()) {
    size_t comma = list.find(',', from);
    std::string item = list.substr(from, comma == std::string::npos ? comma : comma - from);
    if (!item.empty())
      out.push_back(item);
    if (comma == std::string::npos)
      break;
    from = comma + 1;
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rm_rest_benchmark",
                          "GETs per second and their latency against a running resource "
                          "manager's REST API, kept-alive and new connections, alone or beside "
                          "leasing clients.");
  // clang-format off
  cli.add_options()
    ("host", "REST host (IPv4 address or name)", rfaas::cli::value<std::string>()->default_value("127.0.0.1"))
    ("port", "REST port", rfaas::cli::value<int>())
    ("token-file", "file holding the bearer token (operator or read-only) for /nodes, /leases and /accounting", rfaas::cli::value<std::string>()->default_value(""))
    ("mode", "rest (GETs per second) or mixed (leasing clients and a REST poller)", rfaas::cli::value<std::string>()->default_value("rest"))
    ("paths", "rest: comma-separated paths to GET", rfaas::cli::value<std::string>()->default_value("/health,/nodes,/metrics"))
    ("connections", "rest: keep-alive, new (a connection per request), or both", rfaas::cli::value<std::string>()->default_value("keep-alive,new"))
    ("threads", "rest: comma-separated client thread counts", rfaas::cli::value<std::string>()->default_value("1,4"))
    ("seconds", "seconds each measurement (rest) or phase (mixed) runs", rfaas::cli::value<double>()->default_value("2"))
    ("devices", "mixed: device database", rfaas::cli::value<std::string>()->default_value("config/devices.json"))
    ("device", "mixed: device entry of the leasing clients", rfaas::cli::value<std::string>()->default_value("lo-tcp"))
    ("resource-manager", "mixed: the resource manager's fabric host:port", rfaas::cli::value<std::string>())
    ("clients", "mixed: leasing client processes", rfaas::cli::value<int>()->default_value("16"))
    ("csv", "append CSV rows to this file", rfaas::cli::value<std::string>()->default_value(""));
  // clang-format on
  rfaas::cli::add_standard_options(cli);
  return rfaas::cli::run(
      "rm_rest_benchmark", cli, argc, argv, [](const rfaas::cli::ParseResult &args) {
        rfaas::cli::apply_log_level(args);
        if (!args.count("port"))
          throw rfaas::cli::UsageError("--port is required (the resource manager's http.port)");
        int port = args["port"].as<int>();
        if (port < 1 || port > 65535)
          throw rfaas::cli::UsageError("--port must be in 1..65535");
        double seconds = args["seconds"].as<double>();
        if (!(seconds > 0 && seconds <= 3600))
          throw rfaas::cli::UsageError("--seconds must be in (0, 3600]");
        const std::string mode = args["mode"].as<std::string>();
        if (mode != "rest" && mode != "mixed")
          throw rfaas::cli::UsageError("--mode must be rest or mixed, not \"" + mode + "\"");
        Target t;
        t.host = args["host"].as<std::string>();
        t.port = static_cast<uint16_t>(port);
        t.csv = args["csv"].as<std::string>();
        if (const std::string f = args["token-file"].as<std::string>(); !f.empty()) {
          std::ifstream in(f);
          if (!(in >> t.token))
            throw rfaas::cli::UsageError("--token-file " + f + ": cannot read a token");
        }
        try {
          rfaas::http::Client probe(t.host, t.port); // resolves the host once, here
        } catch (const rfaas::http::Error &e) {
          throw rfaas::cli::UsageError(std::string("--host: ") + e.what());
        }

        if (mode == "mixed") {
          if (!args.count("resource-manager"))
            throw rfaas::cli::UsageError("--mode mixed needs --resource-manager HOST:PORT");
          const int clients = args["clients"].as<int>();
          if (clients < 1 || clients > 256)
            throw rfaas::cli::UsageError("--clients must be in 1..256");
          rfaas::bench::LeaseLoad load;
          load.device = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
          load.address = args["resource-manager"].as<std::string>();
          return run_mixed(t, load, clients, seconds);
        }

        std::vector<std::string> paths = split(args["paths"].as<std::string>());
        if (paths.empty())
          throw rfaas::cli::UsageError("--paths names no path");
        for (const std::string &p : paths)
          if (p[0] != '/')
            throw rfaas::cli::UsageError("--paths: \"" + p + "\" does not start with /");
        std::vector<bool> modes;
        for (const std::string &c : split(args["connections"].as<std::string>())) {
          if (c != "keep-alive" && c != "new")
            throw rfaas::cli::UsageError("--connections: \"" + c +
                                         "\" is neither keep-alive nor new");
          modes.push_back(c == "keep-alive");
        }
        if (modes.empty())
          throw rfaas::cli::UsageError("--connections names neither keep-alive nor new");
        const std::vector<int> counts =
            rfaas::bench::parse_count_list("--threads", args["threads"].as<std::string>());
        std::printf("%-11s %-9s %7s %9s %7s %11s %14s %9s %9s\n", "connection", "path", "threads",
                    "requests", "errors", "connections", "requests_per_s", "p50_us", "p99_us");
        int rc = 0;
        for (const std::string &p : paths)
          for (bool keep : modes)
            for (int n : counts)
              rc |= run_rest(t, p, keep, n, seconds);
        return rc;
      });
}
