// Shared by the two ping-pong benchmarks (raw_libfabric_pingpong and
// rdmalib_pingpong): command line, iteration policy, statistics, output and
// the two-process harness. Nothing here knows about a network library, so the
// two programs differ only in the transport code being measured.
//
// Harness: the program forks once, before any network library is initialised.
// The parent is the server (pinned to --server-core), the child the client
// (pinned to --client-core); they share a socketpair for out-of-band setup
// (addresses, memory keys) and for "ready" barriers between measurements, so
// that nothing out-of-band happens inside a timed loop. Every blocking step has
// a deadline; the client dies with its parent (PR_SET_PDEATHSIG) and the
// parent notices a dead client from its spin loops, so a failure on either side
// ends both processes promptly.
//
// Across two hosts (--role server on one, --role client on the other, the same
// options on both) the out-of-band channel is a TCP connection to --oob
// HOST:PORT instead; the two sides compare their options over it first, and a
// side whose peer closes that connection during a measurement stops.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "options.hpp"

#include "bench_json.hpp"
#include "stats.hpp"

namespace pingpong {

using Clock = std::chrono::steady_clock;

enum class Mode { Send, WriteImm };

inline const char *mode_name(Mode m) { return m == Mode::Send ? "send" : "writeimm"; }

/// How a side waits for a completion.
enum class WaitPolicy { Auto, Busy, Block };

/// Which processes this invocation runs: both (fork, one host) or one side of
/// a two-host run.
enum class Role { Both, Server, Client };

inline const char *wait_name(WaitPolicy w) {
  switch (w) {
  case WaitPolicy::Busy:
    return "busy";
  case WaitPolicy::Block:
    return "block";
  default:
    return "auto";
  }
}

struct Options {
  std::string program;
  std::string provider = "tcp";
  std::string endpoint = "auto"; // auto | msg | rdm
  std::string host = "127.0.0.1";
  std::vector<Mode> modes{Mode::Send, Mode::WriteImm};
  std::vector<size_t> sizes{8, 1024, 64 * 1024, 1024 * 1024};
  size_t iters = 0;  // 0 = per-size default (default_iterations)
  size_t warmup = 0; // 0 = per-size default (default_warmup)
  WaitPolicy wait = WaitPolicy::Auto;
  int server_core = 0;
  int client_core = 1;
  bool pin = true;
  Role role = Role::Both;
  std::string oob; // HOST:PORT of the server's out-of-band listener (two-host runs)
  int timeout_s = 60;
  double budget_s = 1.0; // per measurement; 0 = always run all iterations
  std::string csv;
  std::string json;
  std::vector<std::string> argv;
  bool csv_header = true;
  bool quiet = false;
  /// A program's own options that both sides of a two-host run must share
  /// (ExtraOptions::fingerprint), compared with the shared ones.
  std::string extra_fingerprint;
};

/// Iterations measured for one size: enough for a stable median and a
/// meaningful p99, few enough that a tcp + shm sweep of both programs stays
/// well under a minute on a loaded 2-core machine.
inline size_t default_iterations(size_t size) {
  if (size <= 1024)
    return 10000;
  if (size <= 64 * 1024)
    return 2000;
  return 300;
}

inline size_t default_warmup(size_t size) {
  if (size <= 1024)
    return 1000;
  if (size <= 64 * 1024)
    return 200;
  return 30;
}

inline size_t parse_size(const std::string &text) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception &) {
    throw std::invalid_argument("bad size '" + text + "'");
  }
  std::string suffix = text.substr(pos);
  if (suffix == "" || suffix == "B" || suffix == "b")
    return v;
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    return v * 1024;
  if (suffix == "M" || suffix == "m" || suffix == "MiB")
    return v * 1024 * 1024;
  throw std::invalid_argument("bad size suffix in '" + text + "' (use B, K or M)");
}

inline std::vector<std::string> split(const std::string &text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(sep, start);
    if (end == std::string::npos)
      end = text.size();
    if (end > start)
      out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// "<program> (rFaaS x.y.z), network backend <name> <version>": each program
/// defines it (the raw baseline without rdmalib).
std::string version_text(const char *program);

/// A program's own options beyond the shared ones: `add` declares them,
/// `read` takes their values (throwing std::invalid_argument on a bad one).
struct ExtraOptions {
  std::function<void(rfaas::cli::Options &)> add;
  std::function<void(const rfaas::cli::ParseResult &)> read;
  /// --help text of -n, -w and --budget for a program that counts them
  /// otherwise (raw_vs_rdmalib_pingpong: per block); empty = the shared text.
  std::string iters_help, warmup_help, budget_help;
  /// After read: the program's own options that the two sides of a two-host
  /// run must agree on, as text (run_fingerprint).
  std::function<std::string()> fingerprint;
};

/// Parse the command line shared by the raw and rdmalib programs. Prints help
/// and exits on --help; throws std::invalid_argument on a bad value.
inline Options parse_options(int argc, char **argv, const char *program, const char *what,
                             const ExtraOptions &extra = {}) {
  rfaas::cli::Options spec(program, what);
  auto help_or = [](const std::string &own, const char *shared) {
    return own.empty() ? std::string(shared) : own;
  };
  // clang-format off
  spec.add_options()
    ("p,provider", "libfabric provider or alias: tcp, shm, sockets, \"tcp;ofi_rxm\", ...",
     rfaas::cli::value<std::string>()->default_value("tcp"))
    ("e,endpoint", "endpoint type: auto (provider's natural one), connected (or msg) or rdm",
     rfaas::cli::value<std::string>()->default_value("auto"))
    ("host", "this host's address on the fabric (both sides on one host: the loopback address)",
     rfaas::cli::value<std::string>()->default_value("127.0.0.1"))
    ("role", "both (fork a server and a client on this host), or server / client for a run "
     "across two hosts (start both with the same options and --oob)",
     rfaas::cli::value<std::string>()->default_value("both"))
    ("oob", "two-host runs: HOST:PORT where the server listens for the out-of-band TCP "
     "connection (the server binds PORT on HOST, 0 = any free port, printed; the client "
     "connects to it)",
     rfaas::cli::value<std::string>())
    ("m,modes", "comma-separated: send, writeimm (alias write)",
     rfaas::cli::value<std::string>()->default_value("send,writeimm"))
    ("s,sizes", "comma-separated payload sizes (suffix K, M)",
     rfaas::cli::value<std::string>()->default_value("8,1K,64K,1M"))
    ("n,iters", help_or(extra.iters_help, "measured round trips per size (0 = 10000 up to 1 KiB, "
     "2000 up to 64 KiB, 300 above)"),
     rfaas::cli::value<size_t>()->default_value("0"))
    ("w,warmup", help_or(extra.warmup_help, "unmeasured round trips before each size (0 = about "
     "a tenth of iters)"),
     rfaas::cli::value<size_t>()->default_value("0"))
    ("wait", "completion wait: busy (spin on the CQ), block (sleep in the provider), auto",
     rfaas::cli::value<std::string>()->default_value("auto"))
    ("server-core", "CPU the server process is pinned to", rfaas::cli::value<int>()->default_value("0"))
    ("client-core", "CPU the client process is pinned to", rfaas::cli::value<int>()->default_value("1"))
    ("no-pin", "do not pin the processes")
    ("t,timeout", "overall deadline in seconds; both processes exit with an error after it",
     rfaas::cli::value<int>()->default_value("60"))
    ("b,budget", help_or(extra.budget_help, "seconds per (mode,size) after which measuring "
     "stops early, once at least min(iters,500) round trips are in (0 = never; the table shows "
     "the count measured)"),
     rfaas::cli::value<double>()->default_value("1"))
    ("csv", "append one CSV row per (mode,size) to this file", rfaas::cli::value<std::string>())
    ("json", "write the run (metadata, rows, latency CDFs) as JSON to this file",
     rfaas::cli::value<std::string>())
    ("no-csv-header", "do not write the CSV header even if the file is new/empty")
    ("q,quiet", "print only the result table")
    ("h,help", "this help")
    ("version", "print the rFaaS version, the network backend and its library version");
  // clang-format on
  if (extra.add)
    extra.add(spec);
  rfaas::cli::ParseResult r;
  try {
    r = spec.parse(argc, argv);
  } catch (const std::exception &e) {
    throw std::invalid_argument(e.what());
  }
  if (r.count("help")) {
    std::printf("%s\n", spec.help().c_str());
    std::exit(0);
  }
  if (r.count("version")) {
    std::printf("%s\n", version_text(program).c_str());
    std::exit(0);
  }
  Options o;
  o.program = program;
  o.provider = r["provider"].as<std::string>();
  o.endpoint = r["endpoint"].as<std::string>();
  // The names rdmalib::parse_endpoint_preference reads everywhere else; the raw
  // baseline cannot link rdmalib, so both benchmarks keep libfabric's "msg" inside.
  if (o.endpoint == "connected")
    o.endpoint = "msg";
  if (o.endpoint != "auto" && o.endpoint != "msg" && o.endpoint != "rdm")
    throw std::invalid_argument("--endpoint must be one of auto, connected (or msg), rdm, not '" +
                                o.endpoint + "'");
  o.host = r["host"].as<std::string>();
  o.modes.clear();
  for (const auto &m : split(r["modes"].as<std::string>(), ',')) {
    if (m == "send")
      o.modes.push_back(Mode::Send);
    else if (m == "writeimm" || m == "write" || m == "write_imm")
      o.modes.push_back(Mode::WriteImm);
    else
      throw std::invalid_argument("unknown mode '" + m + "' (send, writeimm)");
  }
  o.sizes.clear();
  for (const auto &s : split(r["sizes"].as<std::string>(), ','))
    o.sizes.push_back(parse_size(s));
  if (o.modes.empty() || o.sizes.empty())
    throw std::invalid_argument("need at least one mode and one size");
  for (size_t s : o.sizes)
    if (s == 0 || s > (size_t(1) << 30))
      throw std::invalid_argument("sizes must be between 1 B and 1 GiB");
  o.iters = r["iters"].as<size_t>();
  o.warmup = r["warmup"].as<size_t>();
  std::string w = r["wait"].as<std::string>();
  if (w == "busy")
    o.wait = WaitPolicy::Busy;
  else if (w == "block")
    o.wait = WaitPolicy::Block;
  else if (w == "auto")
    o.wait = WaitPolicy::Auto;
  else
    throw std::invalid_argument("--wait must be busy, block or auto, not '" + w + "'");
  o.server_core = r["server-core"].as<int>();
  o.client_core = r["client-core"].as<int>();
  o.pin = r.count("no-pin") == 0;
  std::string role = r["role"].as<std::string>();
  if (role == "both")
    o.role = Role::Both;
  else if (role == "server")
    o.role = Role::Server;
  else if (role == "client")
    o.role = Role::Client;
  else
    throw std::invalid_argument("--role must be both, server or client, not '" + role + "'");
  if (r.count("oob"))
    o.oob = r["oob"].as<std::string>();
  if (o.role != Role::Both && o.oob.empty())
    throw std::invalid_argument("--role " + role + " needs --oob HOST:PORT");
  if (o.role == Role::Both && !o.oob.empty())
    throw std::invalid_argument("--oob is for two-host runs (--role server or client)");
  o.timeout_s = r["timeout"].as<int>();
  if (o.timeout_s <= 0)
    throw std::invalid_argument("--timeout must be positive");
  o.budget_s = r["budget"].as<double>();
  if (o.budget_s < 0)
    throw std::invalid_argument("--budget must be >= 0");
  if (r.count("csv"))
    o.csv = r["csv"].as<std::string>();
  if (r.count("json"))
    o.json = r["json"].as<std::string>();
  o.argv = bench_json::args_of(argc, argv);
  o.csv_header = r.count("no-csv-header") == 0;
  o.quiet = r.count("quiet") != 0;
  if (extra.read)
    extra.read(r);
  if (extra.fingerprint)
    o.extra_fingerprint = extra.fingerprint();
  return o;
}

// ---- measurement schedule ---------------------------------------------------------
//
// The client decides when a measurement ends (iteration count, or the time
// budget on a loaded machine) and says so in band: the first payload byte of its
// last ping is kLastMarker. It lands in the server's receive slot (send) or RMA
// target (writeimm), which the server looks at anyway, so both programs pay the
// same single byte read per round trip and no out-of-band traffic is needed
// inside a measurement.
constexpr unsigned char kServerFill = 0xA5;
constexpr unsigned char kClientFill = 0x5A;
constexpr unsigned char kLastMarker = 0x4C;

struct Schedule {
  size_t warm = 0, iters = 0, min_measured = 0;
  Clock::duration budget{};
  Clock::time_point measure_start{};

  /// Whether round trip `i` (0-based, warm-up included), starting at `t0`, is the last.
  bool last(size_t i, Clock::time_point t0) {
    if (i == warm)
      measure_start = t0;
    if (i + 1 >= warm + iters)
      return true;
    return budget.count() > 0 && i >= warm + min_measured && t0 - measure_start > budget;
  }
};

inline size_t max_size(const Options &o) {
  return *std::max_element(o.sizes.begin(), o.sizes.end());
}
inline size_t iterations_for(const Options &o, size_t size) {
  return o.iters ? o.iters : default_iterations(size);
}
inline size_t warmup_for(const Options &o, size_t size) {
  return o.warmup ? o.warmup
                  : (o.iters ? std::max<size_t>(o.iters / 10, 10) : default_warmup(size));
}
inline Schedule schedule_for(const Options &o, size_t size) {
  Schedule s;
  s.warm = warmup_for(o, size);
  s.iters = iterations_for(o, size);
  s.min_measured = std::min<size_t>(s.iters, 500);
  s.budget = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.budget_s));
  return s;
}

// ---- failure, deadlines, liveness ----------------------------------------------

/// Which side this process is, for messages.
inline const char *&side_name() {
  static const char *name = "main";
  return name;
}

[[noreturn]] inline void die(const char *fmt, ...) {
  std::fflush(stdout);
  std::fprintf(stderr, "[%s] error: ", side_name());
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::_Exit(2);
}

/// The process-wide deadline and the peer's liveness. check() is cheap enough
/// to call every few thousand spins of a polling loop.
struct Watchdog {
  Clock::time_point deadline;
  pid_t child = -1;      // server: the client process
  pid_t parent = -1;     // client: the server process
  int peer_fd = -1;      // two-host runs: the out-of-band connection to the peer
  const char *what = ""; // what we are waiting for, for the timeout message

  void check() {
    if (Clock::now() > deadline)
      die("deadline passed while waiting for %s (raise --timeout?)", what);
    if (child > 0) {
      int st = 0;
      pid_t r = ::waitpid(child, &st, WNOHANG);
      if (r == child) {
        child = -1;
        die("the client process exited (%s %d) while the server waited for %s",
            WIFEXITED(st) ? "status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
            what);
      }
    }
    if (parent > 0 && ::getppid() != parent)
      die("the server process went away while the client waited for %s", what);
    if (peer_fd >= 0) {
      // Nothing is sent out of band inside a measurement, so a readable
      // connection with nothing to read means the peer has gone.
      pollfd pfd{peer_fd, POLLIN, 0};
      char byte;
      if (::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR) ||
                                     ::recv(peer_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0))
        die("the peer closed the out-of-band connection while we waited for %s", what);
    }
  }
  /// Remaining milliseconds until the deadline (at least 1).
  int remaining_ms() const {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 1 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 1;
  }
};

inline Watchdog &watchdog() {
  static Watchdog w;
  return w;
}

/// Call in every pass of every wait loop: checks the deadline and the peer
/// every 4096 calls, counted process-wide so that a run of short waits is
/// checked as well as one long one.
inline void spin_check() {
  static uint32_t counter = 0;
  if ((++counter & 4095u) == 0)
    watchdog().check();
}

// ---- out-of-band channel (socketpair) ---------------------------------------------

class Oob {
public:
  explicit Oob(int fd = -1) : fd_(fd) {}
  int fd() const { return fd_; }

  void send_bytes(const void *data, size_t len) {
    const char *p = static_cast<const char *>(data);
    while (len > 0) {
      ssize_t n = ::send(fd_, p, len, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        die("out-of-band send failed: %s", std::strerror(errno));
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  void recv_bytes(void *data, size_t len, const char *what) {
    char *p = static_cast<char *>(data);
    while (len > 0) {
      pollfd pfd{fd_, POLLIN, 0};
      int r = ::poll(&pfd, 1, 100);
      if (r < 0 && errno != EINTR)
        die("poll on the out-of-band channel: %s", std::strerror(errno));
      if (r <= 0) {
        watchdog().what = what;
        watchdog().check();
        continue;
      }
      ssize_t n = ::recv(fd_, p, len, 0);
      if (n < 0 && errno == EINTR)
        continue;
      if (n == 0)
        die("the peer closed the out-of-band channel while we waited for %s", what);
      if (n < 0)
        die("out-of-band recv failed: %s", std::strerror(errno));
      p += n;
      len -= static_cast<size_t>(n);
    }
  }
  template <class T> void send_value(const T &v) { send_bytes(&v, sizeof v); }
  template <class T> T recv_value(const char *what) {
    T v{};
    recv_bytes(&v, sizeof v, what);
    return v;
  }
  void send_blob(const std::vector<uint8_t> &b) {
    uint32_t n = static_cast<uint32_t>(b.size());
    send_value(n);
    if (n)
      send_bytes(b.data(), n);
  }
  std::vector<uint8_t> recv_blob(const char *what) {
    uint32_t n = recv_value<uint32_t>(what);
    if (n > (1u << 20))
      die("out-of-band blob of %u bytes is implausible", n);
    std::vector<uint8_t> b(n);
    if (n)
      recv_bytes(b.data(), n, what);
    return b;
  }
  /// Both sides call it with the same tag: a rendezvous outside timed regions.
  void barrier(uint32_t tag, const char *what) {
    send_value(tag);
    uint32_t got = recv_value<uint32_t>(what);
    if (got != tag)
      die("out-of-band barrier mismatch at %s: expected %u, got %u", what, tag, got);
  }

private:
  int fd_;
};

// ---- statistics and output ------------------------------------------------------

struct Row {
  Mode mode;
  size_t size;
  size_t iters;
  double median_us, p99_us, min_us, mean_us;
  bench_json::Value cdf{};
};

inline Row summarise(Mode mode, size_t size, std::vector<double> &us) {
  std::sort(us.begin(), us.end());
  const bench_stats::Summary s = bench_stats::summarise_sorted(us);
  Row r{mode, size, s.n, s.median, s.p99, s.min, s.mean, {}};
  if (s.n == 0)
    return r;
  r.cdf = bench_json::cdf(us);
  return r;
}

/// Identification printed above the table and stored in every CSV row.
struct RunInfo {
  std::string impl;     // "raw" or "rdmalib"
  std::string provider; // provider actually opened
  std::string endpoint; // "msg" or "rdm"
  std::string wait;     // "busy" or "block"
  std::string detail;   // free text for the header line (versions, caps)
};

inline void print_header(const Options &o, const RunInfo &info) {
  if (!o.quiet) {
    std::printf("# %s impl=%s provider=%s endpoint=%s wait=%s pin=%s %s\n", o.program.c_str(),
                info.impl.c_str(), info.provider.c_str(), info.endpoint.c_str(), info.wait.c_str(),
                o.pin
                    ? (std::to_string(o.server_core) + "," + std::to_string(o.client_core)).c_str()
                    : "no",
                info.detail.c_str());
  }
  std::printf("%-9s %9s %7s %11s %11s %11s %11s %9s\n", "mode", "size", "iters", "median_us",
              "p99_us", "min_us", "mean_us", "GB/s");
  std::fflush(stdout);
}

inline void print_row(const Row &r) {
  // Bytes carried per round trip (one payload each way) over the median.
  double gbps = r.median_us > 0 ? 2.0 * static_cast<double>(r.size) / (r.median_us * 1e3) : 0;
  std::printf("%-9s %9zu %7zu %11.2f %11.2f %11.2f %11.2f %9.3f\n", mode_name(r.mode), r.size,
              r.iters, r.median_us, r.p99_us, r.min_us, r.mean_us, gbps);
  std::fflush(stdout);
}

/// --csv: the file opened for appending, with `header` (one line, newline
/// included) written first when the file is new or empty and the header is
/// wanted (--no-csv-header).
inline std::ofstream open_csv(const Options &o, const char *header) {
  bool fresh = true;
  {
    std::ifstream in(o.csv);
    fresh = !in.good() || in.peek() == std::ifstream::traits_type::eof();
  }
  std::ofstream out(o.csv, std::ios::app);
  if (!out)
    die("cannot open %s for writing", o.csv.c_str());
  if (fresh && o.csv_header)
    out << header;
  return out;
}

inline void write_csv(const Options &o, const RunInfo &info, const std::vector<Row> &rows) {
  if (o.csv.empty())
    return;
  std::ofstream out =
      open_csv(o, "impl,provider,endpoint,wait,mode,size,iters,median_us,p99_us,min_us,mean_us\n");
  char line[512];
  for (const Row &r : rows) {
    std::snprintf(line, sizeof line, "%s,\"%s\",%s,%s,%s,%zu,%zu,%.3f,%.3f,%.3f,%.3f\n",
                  info.impl.c_str(), info.provider.c_str(), info.endpoint.c_str(),
                  info.wait.c_str(), mode_name(r.mode), r.size, r.iters, r.median_us, r.p99_us,
                  r.min_us, r.mean_us);
    out << line;
  }
  if (!out)
    die("writing %s failed", o.csv.c_str());
}

/// The run as JSON (--json): metadata, the options, one result per row.
/// `backend` is "libfabric" for both programs (the raw one has no other).
inline void write_json(const Options &o, const RunInfo &info, const std::string &backend,
                       const std::string &backend_version, const std::vector<Row> &rows) {
  if (o.json.empty())
    return;
  bench_json::Value doc = bench_json::document(
      {o.program, backend, backend_version, info.provider, info.endpoint, o.argv});
  bench_json::Value &p = doc["parameters"];
  p["impl"] = info.impl;
  p["wait"] = info.wait;
  p["host_address"] = o.host;
  p["pinned"] = o.pin;
  p["server_core"] = o.server_core;
  p["client_core"] = o.client_core;
  p["iters"] = o.iters;
  p["budget_s"] = o.budget_s;
  bench_json::Value &results = doc["results"];
  for (const Row &r : rows) {
    bench_json::Value v = bench_json::Value::object();
    v["kind"] = "latency";
    v["impl"] = info.impl;
    v["mode"] = mode_name(r.mode);
    v["size"] = r.size;
    v["iters"] = r.iters;
    v["median_us"] = r.median_us;
    v["p99_us"] = r.p99_us;
    v["min_us"] = r.min_us;
    v["mean_us"] = r.mean_us;
    v["cdf"] = r.cdf;
    results.push(std::move(v));
  }
  try {
    bench_json::write(o.json, doc);
  } catch (const std::exception &e) {
    die("%s", e.what());
  }
}

inline double elapsed_us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// ---- process harness ----------------------------------------------------------------

inline void pin_to(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  if (::sched_setaffinity(0, sizeof set, &set) != 0)
    die("cannot pin to CPU %d: %s (use --no-pin or another --server-core/--client-core)", core,
        std::strerror(errno));
}

/// What both sides of a two-host run must agree on: the schedule and the
/// transport. Compared once over the out-of-band connection.
inline std::string run_fingerprint(const Options &o) {
  std::string f = o.program + " provider=" + o.provider + " endpoint=" + o.endpoint + " modes=";
  for (Mode m : o.modes)
    f += std::string(mode_name(m)) + ",";
  f += " sizes=";
  for (size_t z : o.sizes)
    f += std::to_string(z) + ",";
  f += " iters=" + std::to_string(o.iters) + " warmup=" + std::to_string(o.warmup) +
       " wait=" + wait_name(o.wait) + " budget=" + std::to_string(o.budget_s);
  if (!o.extra_fingerprint.empty())
    f += " " + o.extra_fingerprint;
  return f;
}

/// HOST:PORT (HOST may be a bracketed IPv6 address) into its two parts.
inline void split_host_port(const std::string &hp, std::string &host, std::string &port) {
  size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == hp.size())
    die("--oob expects HOST:PORT, got '%s'", hp.c_str());
  host = hp.substr(0, colon);
  port = hp.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
}

/// The out-of-band TCP connection of a two-host run: the server binds and
/// accepts one peer, the client connects, retrying until the deadline because
/// the two sides are started independently (srun, ssh) in any order.
inline int oob_connect(const Options &o, Clock::time_point deadline) {
  std::string host, port;
  split_host_port(o.oob, host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (o.role == Role::Server)
    hints.ai_flags = AI_PASSIVE;
  addrinfo *res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    die("--oob %s: %s", o.oob.c_str(), ::gai_strerror(rc));
  int fd = -1;
  if (o.role == Role::Server) {
    int lfd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || ::bind(lfd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(lfd, 1) != 0)
      die("--oob %s: cannot listen: %s", o.oob.c_str(), std::strerror(errno));
    ::freeaddrinfo(res);
    // With port 0 the system chooses one: print the real one for the client.
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    char bhost[NI_MAXHOST] = "?", bport[NI_MAXSERV] = "?";
    if (::getsockname(lfd, reinterpret_cast<sockaddr *>(&bound), &blen) == 0)
      ::getnameinfo(reinterpret_cast<sockaddr *>(&bound), blen, bhost, sizeof bhost, bport,
                    sizeof bport, NI_NUMERICHOST | NI_NUMERICSERV);
    std::fprintf(stderr, "[server] waiting for the client on %s port %s\n", bhost, bport);
    watchdog().what = "the client's out-of-band connection";
    for (;;) {
      pollfd pfd{lfd, POLLIN, 0};
      if (::poll(&pfd, 1, 100) > 0) {
        fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0)
          break;
      }
      watchdog().check();
    }
    ::close(lfd);
  } else {
    watchdog().what = "the server's out-of-band listener (is --role server running?)";
    for (;;) {
      for (addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
          ::close(fd);
          fd = -1;
        }
      }
      if (fd >= 0)
        break;
      if (Clock::now() > deadline)
        break;
      ::usleep(100 * 1000);
      watchdog().check();
    }
    ::freeaddrinfo(res);
    if (fd < 0)
      die("could not reach the server's out-of-band listener at %s by the deadline", o.oob.c_str());
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/// One side of a two-host run. Returns the process exit code.
inline int run_one_side(const Options &o, const std::function<void(Oob &)> &server,
                        const std::function<void(Oob &)> &client) {
  const bool is_server = o.role == Role::Server;
  side_name() = is_server ? "server" : "client";
  auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  watchdog().deadline = deadline;
  if (o.pin)
    pin_to(is_server ? o.server_core : o.client_core);
  int fd = oob_connect(o, deadline);
  Oob oob(fd);
  std::string mine = run_fingerprint(o);
  oob.send_blob(std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<uint8_t> theirs_b = oob.recv_blob("the peer's options");
  std::string theirs(theirs_b.begin(), theirs_b.end());
  if (theirs != mine)
    die("the two sides were started with different options:\n  this side: %s\n  the peer:  %s",
        mine.c_str(), theirs.c_str());
  watchdog().peer_fd = fd;
  if (is_server)
    server(oob);
  else
    client(oob);
  watchdog().peer_fd = -1;
  std::fflush(stdout);
  ::close(fd);
  return 0;
}

/// Fork into server (parent) and client (child) and run the two functions with
/// the out-of-band channel; or, with --role server/client, run one of them
/// against a peer on another host. Returns the process exit code: 0 when both
/// sides succeeded. The client prints the results.
inline int run_pair(const Options &o, const std::function<void(Oob &)> &server,
                    const std::function<void(Oob &)> &client) {
  if (o.role != Role::Both)
    return run_one_side(o, server, client);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    die("socketpair: %s", std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t parent = ::getpid();
  auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  pid_t pid = ::fork();
  if (pid < 0)
    die("fork: %s", std::strerror(errno));
  if (pid == 0) {
    // Client. Die with the server so that no client is ever left behind.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)
      std::_Exit(3);
    ::close(sv[0]);
    side_name() = "client";
    watchdog().deadline = deadline;
    watchdog().parent = parent;
    if (o.pin)
      pin_to(o.client_core);
    Oob oob(sv[1]);
    client(oob);
    std::fflush(stdout);
    std::_Exit(0);
  }
  ::close(sv[1]);
  side_name() = "server";
  watchdog().deadline = deadline;
  watchdog().child = pid;
  if (o.pin)
    pin_to(o.server_core);
  Oob oob(sv[0]);
  server(oob);
  // The client finishes right after the server's last reply; give it until the
  // deadline (plus a grace second) to exit, then kill it.
  int status = 0;
  auto hard = deadline + std::chrono::seconds(1);
  for (;;) {
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      break;
    if (r < 0 && errno != EINTR)
      die("waitpid: %s", std::strerror(errno));
    if (Clock::now() > hard) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      std::fprintf(stderr, "[server] error: the client did not exit by the deadline; killed it\n");
      return 2;
    }
    ::usleep(1000);
  }
  watchdog().child = -1;
  ::close(sv[0]);
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  std::fprintf(stderr, "[server] error: the client died of signal %d\n", WTERMSIG(status));
  return 2;
}

/// Wrap main(): parse options, report errors uniformly.
inline int guarded_main(int argc, char **argv, const char *program, const char *what,
                        const std::function<int(const Options &)> &body,
                        const ExtraOptions &extra = {}) {
  Options o;
  try {
    o = parse_options(argc, argv, program, what, extra);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "%s: %s (see --help)\n", program, e.what());
    return 2; // usage error
  }
  try {
    return body(o);
  } catch (const std::exception &e) {
    die("%s", e.what());
  }
}

} // namespace pingpong
