// rm_rest_benchmark: requests per second against a running resource
// manager's REST API (GET only: nothing is changed), from several threads,
// each with one kept-alive HTTP/1.1 connection (reopened when the server
// closes it). Prints requests per second, the median and p99 of one request,
// and how many connections were opened.
//
//   rm_rest_benchmark --port 8080 --path /nodes --threads 1,4 --seconds 2
//
// The HTTP client is the smallest that reads these answers: a status line,
// headers with Content-Length, a body. Anything else (no Content-Length, a
// status other than 200) counts as an error, and the run fails with the first
// one printed.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "options.hpp"

#include "cli.hpp"
#include "count_list.hpp"
#include "stats.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Target {
  std::string host;
  uint16_t port = 0;
  std::string path;
  /// "Authorization: Bearer ..." line, or empty (reads of /nodes, /leases
  /// and /accounting need a token).
  std::string auth;
  sockaddr_in addr{};
};

/// One kept-alive connection.
class Connection {
public:
  explicit Connection(const Target &t) : t_(t) {
    request_ = "GET " + t.path + " HTTP/1.1\r\nHost: " + t.host + ":" + std::to_string(t.port) +
               "\r\nAccept: */*\r\n" + t.auth + "\r\n";
  }
  ~Connection() { drop(); }
  Connection(const Connection &) = delete;
  Connection &operator=(const Connection &) = delete;

  /// One request; false with `error` set on anything but a complete 200.
  bool get(std::string &error) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0 && !open(error))
        return false;
      bool fresh = just_opened_;
      just_opened_ = false;
      if (exchange(error))
        return true;
      drop();
      // A kept-alive connection the server closed meanwhile: retry once on a
      // new one. A failure on a fresh connection is real.
      if (fresh || !closed_by_peer_)
        return false;
    }
    return false;
  }

  uint64_t opened() const { return opened_; }

private:
  bool open(std::string &error) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      return false;
    }
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd_, reinterpret_cast<const sockaddr *>(&t_.addr), sizeof t_.addr) != 0) {
      error = "connect to " + t_.host + ":" + std::to_string(t_.port) + ": " + std::strerror(errno);
      drop();
      return false;
    }
    ++opened_;
    just_opened_ = true;
    buf_.clear();
    return true;
  }

  void drop() {
    if (fd_ >= 0)
      close(fd_);
    fd_ = -1;
  }

  bool exchange(std::string &error) {
    closed_by_peer_ = false;
    for (size_t off = 0; off < request_.size();) {
      ssize_t n = send(fd_, request_.data() + off, request_.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        closed_by_peer_ = true;
        error = std::string("send: ") + std::strerror(errno);
        return false;
      }
      off += static_cast<size_t>(n);
    }
    // Headers, then Content-Length bytes of body; bytes past it stay in buf_
    // (there are none: one request at a time).
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(error))
        return false;
    std::string head = buf_.substr(0, head_end);
    if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) {
      error = "not an HTTP answer: " + head.substr(0, 40);
      return false;
    }
    int status = std::atoi(head.c_str() + 9);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    size_t cl = lower.find("\r\ncontent-length:");
    if (cl == std::string::npos) {
      error = "an answer without Content-Length";
      return false;
    }
    size_t len = std::strtoul(head.c_str() + cl + 17, nullptr, 10);
    while (buf_.size() < head_end + 4 + len)
      if (!fill(error))
        return false;
    buf_.erase(0, head_end + 4 + len);
    if (lower.find("\r\nconnection: close") != std::string::npos)
      drop();
    if (status != 200) {
      error = "status " + std::to_string(status) + " for GET " + t_.path;
      return false;
    }
    return true;
  }

  bool fill(std::string &error) {
    char tmp[16384];
    ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      closed_by_peer_ = n == 0 || errno == ECONNRESET;
      error = n == 0 ? "the server closed the connection"
                     : std::string("recv: ") + std::strerror(errno);
      return false;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  const Target &t_;
  std::string request_;
  std::string buf_;
  int fd_ = -1;
  bool just_opened_ = false;
  bool closed_by_peer_ = false;
  uint64_t opened_ = 0;
};

struct ThreadResult {
  uint64_t ok = 0;
  uint64_t errors = 0;
  uint64_t connections = 0;
  std::vector<double> us;
  std::string error;
};

void run_thread(const Target &t, Clock::time_point start, Clock::time_point end, ThreadResult &r) {
  Connection c(t);
  r.us.reserve(1 << 18);
  std::this_thread::sleep_until(start);
  for (Clock::time_point now = Clock::now(); now < end;) {
    std::string error;
    bool ok = c.get(error);
    Clock::time_point done = Clock::now();
    if (ok) {
      ++r.ok;
      if (r.us.size() < r.us.capacity())
        r.us.push_back(std::chrono::duration<double, std::micro>(done - now).count());
    } else {
      ++r.errors;
      if (r.error.empty())
        r.error = error;
      if (r.errors >= 100)
        break; // the server is gone or refuses: no point hammering it
    }
    now = done;
  }
  r.connections = c.opened();
}

void append_csv(const std::string &path, const std::string &line) {
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
    out << "benchmark,path,threads,seconds,requests,errors,connections,requests_per_s,median_us,"
           "p99_us\n";
  out << line << "\n";
  if (!out)
    throw std::runtime_error("writing " + path + " failed");
}

int run(const Target &t, int threads, double seconds, const std::string &csv) {
  std::vector<ThreadResult> rs(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  // A common start a little ahead, so that thread creation is not measured.
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);
  const Clock::time_point end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < threads; ++i)
    workers.emplace_back(run_thread, std::cref(t), start, end,
                         std::ref(rs[static_cast<size_t>(i)]));
  for (std::thread &w : workers)
    w.join();
  const double elapsed = std::chrono::duration<double>(std::max(Clock::now(), end) - start).count();
  uint64_t ok = 0, errors = 0, conns = 0;
  std::vector<double> all;
  std::string first_error;
  for (ThreadResult &r : rs) {
    ok += r.ok;
    errors += r.errors;
    conns += r.connections;
    all.insert(all.end(), r.us.begin(), r.us.end());
    if (first_error.empty())
      first_error = r.error;
  }
  std::sort(all.begin(), all.end());
  const double median = bench_stats::median_sorted(all);
  const double p99 = bench_stats::percentile_sorted(all, 0.99);
  double per_s = static_cast<double>(ok) / elapsed;
  std::printf("%-8s %-10s %10s %8s %11s %14s %10s %10s\n", "threads", "path", "requests", "errors",
              "connections", "requests_per_s", "median_us", "p99_us");
  std::printf("%-8d %-10s %10llu %8llu %11llu %14.0f %10.1f %10.1f\n", threads, t.path.c_str(),
              static_cast<unsigned long long>(ok), static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(conns), per_s, median, p99);
  char line[512];
  std::snprintf(line, sizeof line, "rest,%s,%d,%.3f,%llu,%llu,%llu,%.1f,%.3f,%.3f", t.path.c_str(),
                threads, elapsed, static_cast<unsigned long long>(ok),
                static_cast<unsigned long long>(errors), static_cast<unsigned long long>(conns),
                per_s, median, p99);
  append_csv(csv, line);
  if (errors) {
    std::fprintf(stderr, "rm_rest_benchmark: %llu failed request(s), the first: %s\n",
                 static_cast<unsigned long long>(errors), first_error.c_str());
    return 1;
  }
  return ok > 0 ? 0 : 1;
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rm_rest_benchmark",
                          "GET requests per second against a running resource manager's REST API, "
                          "from several threads with one kept-alive connection each.");
  // clang-format off
  cli.add_options()
    ("host", "REST host (IPv4 address or name)", rfaas::cli::value<std::string>()->default_value("127.0.0.1"))
    ("port", "REST port", rfaas::cli::value<int>())
    ("path", "path to GET (/health, /nodes, /leases, /metrics ...)", rfaas::cli::value<std::string>()->default_value("/nodes"))
    ("token-file", "file holding the bearer token (operator or read-only) for /nodes, /leases and /accounting", rfaas::cli::value<std::string>()->default_value(""))
    ("threads", "comma-separated client thread counts", rfaas::cli::value<std::string>()->default_value("1,4"))
    ("seconds", "seconds each count runs", rfaas::cli::value<double>()->default_value("2"))
    ("csv", "append CSV rows to this file", rfaas::cli::value<std::string>()->default_value(""));
  // clang-format on
  rfaas::cli::add_standard_options(cli, false);
  return rfaas::cli::run(
      "rm_rest_benchmark", cli, argc, argv, [](const rfaas::cli::ParseResult &args) {
        if (!args.count("port"))
          throw rfaas::cli::UsageError("--port is required (the resource manager's http.port)");
        int port = args["port"].as<int>();
        if (port < 1 || port > 65535)
          throw rfaas::cli::UsageError("--port must be in 1..65535");
        double seconds = args["seconds"].as<double>();
        if (!(seconds > 0 && seconds <= 3600))
          throw rfaas::cli::UsageError("--seconds must be in (0, 3600]");
        Target t;
        t.host = args["host"].as<std::string>();
        t.port = static_cast<uint16_t>(port);
        t.path = args["path"].as<std::string>();
        if (t.path.empty() || t.path[0] != '/')
          throw rfaas::cli::UsageError("--path must start with /");
        if (const std::string f = args["token-file"].as<std::string>(); !f.empty()) {
          std::ifstream in(f);
          std::string token;
          if (!(in >> token))
            throw rfaas::cli::UsageError("--token-file " + f + ": cannot read a token");
          t.auth = "Authorization: Bearer " + token + "\r\n";
        }
        addrinfo hints{}, *res = nullptr;
        hints.ai_family = AF_INET;
        hints.ai_socktype = SOCK_STREAM;
        if (int rc = getaddrinfo(t.host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
          throw rfaas::cli::UsageError("--host " + t.host + ": " + gai_strerror(rc));
        t.addr = *reinterpret_cast<sockaddr_in *>(res->ai_addr);
        t.addr.sin_port = htons(t.port);
        freeaddrinfo(res);
        int rc = 0;
        for (int n : rfaas::bench::parse_count_list("--threads", args["threads"].as<std::string>()))
          rc |= run(t, n, seconds, args["csv"].as<std::string>());
        return rc;
      });
}
