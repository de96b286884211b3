// A minimal blocking HTTP/1.1 client for the REST tests (one request per
// connection, "Connection: close").
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rfaas::rm::test {

struct HttpResponse {
  int status = 0;
  std::string headers;
  std::string body;
};

inline HttpResponse http(uint16_t port, const std::string &method, const std::string &path,
                         const std::string &body = "", const std::string &token = "") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw std::runtime_error("socket failed");
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    close(fd);
    throw std::runtime_error("connect to port " + std::to_string(port) + " failed");
  }
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  if (!token.empty())
    req += "Authorization: Bearer " + token + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t off = 0; off < req.size();) {
    ssize_t n = send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      throw std::runtime_error("send failed");
    }
    off += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[4096];
  HttpResponse r;
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      break;
    raw.append(buf, static_cast<size_t>(n));
    // Stop at the end of the body (pistache may keep the connection open).
    size_t head_end = raw.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      size_t cl = raw.find("Content-Length: ");
      if (cl != std::string::npos && cl < head_end) {
        size_t len = std::stoul(raw.substr(cl + 16));
        if (raw.size() >= head_end + 4 + len)
          break;
      }
    }
  }
  close(fd);
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || head_end == std::string::npos)
    throw std::runtime_error("no HTTP response from port " + std::to_string(port));
  r.status = std::stoi(raw.substr(9, 3));
  r.headers = raw.substr(0, head_end);
  r.body = raw.substr(head_end + 4);
  return r;
}

} // namespace rfaas::rm::test
