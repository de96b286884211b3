// A small blocking HTTP/1.1 client for the resource manager's REST API, used
// by the benchmarks and the tests (no new dependency; curl is not a library
// here). It speaks just enough HTTP for answers from a known server: a status
// line, headers, and a body framed by Content-Length, by chunked transfer
// coding, or by the server closing the connection.
//
// One Client is one connection at most, kept alive between requests when
// both sides agree (HTTP/1.1's default; "Connection: close" from either
// ends it) and reopened on the next request. Every request has a deadline
// covering connect, send and the whole answer. Not thread-safe: one Client
// per thread.
#pragma once

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rfaas::http {

/// A failed exchange: no connection, a deadline passed, a malformed answer.
/// The message names the request and the cause.
class Error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct Response {
  int status = 0;
  /// The status line and headers as received (without the blank line).
  std::string headers;
  std::string body;
  /// Whether the connection stays open after this answer.
  bool keep_alive = false;

  /// The value of header `name` (case-insensitive), or empty.
  std::string header(const std::string &name) const {
    std::string lower = lowercase(headers), want = "\r\n" + lowercase(name) + ":";
    size_t at = lower.find(want);
    if (at == std::string::npos)
      return {};
    size_t from = at + want.size();
    size_t end = headers.find("\r\n", from);
    std::string v = headers.substr(from, end == std::string::npos ? std::string::npos : end - from);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t'))
      v.erase(v.begin());
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t'))
      v.pop_back();
    return v;
  }

  static std::string lowercase(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  }
};

class Client {
public:
  using Clock = std::chrono::steady_clock;

  /// `host`: an IPv4 address or a name (resolved once, here; throws Error if
  /// it does not resolve). `timeout`: the deadline of each request.
  Client(const std::string &host, uint16_t port,
         std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : host_(host), port_(port), timeout_(timeout) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res)
      throw Error("HTTP host " + host + ": " + gai_strerror(rc));
    addr_ = *reinterpret_cast<sockaddr_in *>(res->ai_addr);
    addr_.sin_port = htons(port);
    freeaddrinfo(res);
  }
  ~Client() { disconnect(); }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  /// false: every request says "Connection: close" and gets a connection of
  /// its own (what a client without keep-alive costs the server).
  void set_keep_alive(bool on) { keep_alive_ = on; }
  /// Sent as "Authorization: Bearer <token>" with every request (empty: none).
  void set_token(const std::string &token) { token_ = token; }

  /// One request; the answer whatever its status. Throws Error when there is
  /// no complete answer within the deadline. A GET or HEAD on a kept-alive
  /// connection that the server had closed meanwhile (its idle timeout) is
  /// sent once more on a new connection; other methods are not repeated.
  Response request(const std::string &method, const std::string &path,
                   const std::string &body = "") {
    const Clock::time_point deadline = Clock::now() + timeout_;
    const bool idempotent = method == "GET" || method == "HEAD";
    for (int attempt = 0;; ++attempt) {
      const bool reused = fd_ >= 0;
      if (!reused)
        connect_by(deadline, method, path);
      try {
        return exchange(method, path, body, deadline);
      } catch (const Stale &e) {
        disconnect();
        if (!reused || !idempotent || attempt > 0)
          throw Error(what(method, path) + ": " + e.what());
      } catch (...) {
        disconnect();
        throw;
      }
    }
  }
  Response get(const std::string &path) { return request("GET", path); }

  /// Connections opened so far (1 for any number of kept-alive requests).
  uint64_t connections_opened() const { return opened_; }
  /// Closes the connection (the next request opens a new one).
  void disconnect() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
    buf_.clear();
  }

private:
  /// The server closed the connection before any byte of the answer.
  struct Stale : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  std::string what(const std::string &method, const std::string &path) const {
    return method + " http://" + host_ + ":" + std::to_string(port_) + path;
  }

  int remaining_ms(Clock::time_point deadline) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  }

  /// Waits until the socket is ready for `events`; throws at the deadline.
  void wait_for(short events, Clock::time_point deadline, const std::string &doing) {
    for (;;) {
      pollfd p{fd_, events, 0};
      int n = ::poll(&p, 1, remaining_ms(deadline));
      if (n > 0)
        return;
      if (n == 0)
        throw Error(doing + ": no answer within " + std::to_string(timeout_.count()) + " ms");
      if (errno != EINTR)
        throw Error(doing + ": poll: " + std::strerror(errno));
    }
  }

  void connect_by(Clock::time_point deadline, const std::string &method, const std::string &path) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd_ < 0)
      throw Error(what(method, path) + ": socket: " + std::strerror(errno));
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<const sockaddr *>(&addr_), sizeof addr_) != 0) {
      if (errno != EINPROGRESS) {
        std::string why = std::strerror(errno);
        disconnect();
        throw Error(what(method, path) + ": connect: " + why);
      }
      try {
        wait_for(POLLOUT, deadline, what(method, path) + ": connect");
      } catch (...) {
        disconnect();
        throw;
      }
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        disconnect();
        throw Error(what(method, path) + ": connect: " + std::strerror(err));
      }
    }
    ++opened_;
  }

  /// Reads more into buf_; false when the server closed the connection.
  bool fill(Clock::time_point deadline, const std::string &doing) {
    char tmp[65536];
    for (;;) {
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
        return true;
      }
      if (n == 0 || errno == ECONNRESET)
        return false;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        wait_for(POLLIN, deadline, doing);
      else if (errno != EINTR)
        throw Error(doing + ": recv: " + std::strerror(errno));
    }
  }

  void send_all(const std::string &data, Clock::time_point deadline, const std::string &doing) {
    for (size_t off = 0; off < data.size();) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n > 0) {
        off += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wait_for(POLLOUT, deadline, doing);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        // A kept-alive connection the server closed: nothing was answered.
        if (off == 0 && (errno == EPIPE || errno == ECONNRESET))
          throw Stale(std::string("send: ") + std::strerror(errno));
        throw Error(doing + ": send: " + std::strerror(errno));
      }
    }
  }

  Response exchange(const std::string &method, const std::string &path, const std::string &body,
                    Clock::time_point deadline) {
    const std::string doing = what(method, path);
    std::string req =
        method + " " + path + " HTTP/1.1\r\nHost: " + host_ + ":" + std::to_string(port_) + "\r\n";
    if (!keep_alive_)
      req += "Connection: close\r\n";
    if (!token_.empty())
      req += "Authorization: Bearer " + token_ + "\r\n";
    if (!body.empty() || (method != "GET" && method != "HEAD"))
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    req += "\r\n" + body;
    send_all(req, deadline, doing);

    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!fill(deadline, doing)) {
        if (buf_.empty())
          throw Stale("the server closed the connection without answering");
        throw Error(doing + ": the connection closed inside the answer's headers");
      }
    Response r;
    r.headers = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    if (r.headers.size() < 12 || r.headers.compare(0, 5, "HTTP/") != 0)
      throw Error(doing + ": not an HTTP answer: " + r.headers.substr(0, 40));
    const bool http10 = r.headers.compare(0, 8, "HTTP/1.0") == 0;
    r.status = std::atoi(r.headers.c_str() + 9);
    const std::string connection = Response::lowercase(r.header("Connection"));
    r.keep_alive = keep_alive_ && connection.find("close") == std::string::npos &&
                   (!http10 || connection.find("keep-alive") != std::string::npos);

    const bool no_body =
        method == "HEAD" || r.status == 204 || r.status == 304 || r.status / 100 == 1;
    const std::string length = r.header("Content-Length");
    if (no_body) {
    } else if (Response::lowercase(r.header("Transfer-Encoding")).find("chunked") !=
               std::string::npos) {
      read_chunked(r.body, deadline, doing);
    } else if (!length.empty()) {
      char *end = nullptr;
      const unsigned long long len = std::strtoull(length.c_str(), &end, 10);
      if (end == length.c_str() || *end != '\0')
        throw Error(doing + ": bad Content-Length \"" + length + "\"");
      while (buf_.size() < len)
        if (!fill(deadline, doing))
          throw Error(doing + ": the connection closed after " + std::to_string(buf_.size()) +
                      " of " + length + " bytes of body");
      r.body = buf_.substr(0, len);
      buf_.erase(0, len);
    } else {
      // Framed by the end of the connection.
      while (fill(deadline, doing)) {
      }
      r.body.swap(buf_);
      r.keep_alive = false;
    }
    if (!r.keep_alive)
      disconnect();
    return r;
  }

  void read_chunked(std::string &out, Clock::time_point deadline, const std::string &doing) {
    for (;;) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos)
        if (!fill(deadline, doing))
          throw Error(doing + ": the connection closed inside a chunk size");
      const size_t size = std::strtoul(buf_.c_str(), nullptr, 16);
      buf_.erase(0, eol + 2);
      if (size == 0) {
        // Trailers, if any, end with an empty line.
        while ((eol = buf_.find("\r\n")) != 0) {
          if (eol == std::string::npos) {
            if (!fill(deadline, doing))
              throw Error(doing + ": the connection closed inside the trailers");
            continue;
          }
          buf_.erase(0, eol + 2);
        }
        buf_.erase(0, 2);
        return;
      }
      while (buf_.size() < size + 2)
        if (!fill(deadline, doing))
          throw Error(doing + ": the connection closed inside a chunk");
      out.append(buf_, 0, size);
      buf_.erase(0, size + 2);
    }
  }

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  sockaddr_in addr_{};
  bool keep_alive_ = true;
  std::string token_;
  int fd_ = -1;
  std::string buf_;
  uint64_t opened_ = 0;
};

/// One request on a connection of its own to 127.0.0.1:`port` (what the
/// tests use): "Connection: close", the token if not empty.
inline Response request(uint16_t port, const std::string &method, const std::string &path,
                        const std::string &body = "", const std::string &token = "",
                        std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  Client c("127.0.0.1", port, timeout);
  c.set_keep_alive(false);
  c.set_token(token);
  return c.request(method, path, body);
}

} // namespace rfaas::http
