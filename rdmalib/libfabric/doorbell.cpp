// The listener's doorbell (see doorbell.hpp).
#include "doorbell.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace rdmalib::lf {

namespace {

/// The abstract address of the doorbell of the endpoint named `name`. Raw
/// names may be longer than a socket name and hold any byte, so the socket
/// is named by a 64-bit hash of it; a collision only costs a spurious wake-up.
socklen_t doorbell_address(const void *name, size_t len, sockaddr_un &a) noexcept {
  uint64_t h = 14695981039346656037ull; // FNV-1a
  const auto *p = static_cast<const unsigned char *>(name);
  for (size_t i = 0; i < len; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  // sun_path[0] stays '\0': the abstract namespace (no file, gone with the
  // socket, so a crashed listener leaves nothing behind).
  int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "rdmalib-doorbell-%016llx",
                        static_cast<unsigned long long>(h));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<size_t>(n));
}

} // namespace

int open_doorbell(const void *name, size_t len) noexcept {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  sockaddr_un a;
  socklen_t alen = doorbell_address(name, len, a);
  if (::bind(fd, reinterpret_cast<const sockaddr *>(&a), alen) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void ring_doorbell(const void *name, size_t len) noexcept {
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return;
  sockaddr_un a;
  socklen_t alen = doorbell_address(name, len, a);
  char b = 1;
  // A full doorbell (EAGAIN) is already readable: nothing lost.
  ssize_t r = ::sendto(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr *>(&a), alen);
  (void)r;
  ::close(fd);
}

void drain_doorbell(int fd) noexcept {
  if (fd < 0)
    return;
  char buf[64];
  while (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) >= 0 || errno == EINTR) {
  }
}

} // namespace rdmalib::lf
