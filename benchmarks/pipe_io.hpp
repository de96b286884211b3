// Pipes between a benchmark and the child processes it forks (clients,
// simulated hosts): their readiness bytes and result records arrive there,
// and a child that hangs must not hang the benchmark.
#pragma once

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>

namespace rfaas::bench {

/// Reads exactly `len` bytes from `fd` within `timeout_ms`; false on end of
/// file, error or timeout.
inline bool read_full(int fd, void *buf, size_t len, int timeout_ms) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  size_t got = 0;
  while (got < len) {
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0)
      return false;
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, left);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return false;
    ssize_t n = ::read(fd, static_cast<char *>(buf) + got, len - got);
    if (n <= 0)
      return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

} // namespace rfaas::bench
