// Connection::connect for both backends: one attempt is the backend's
// connect_once; what to do about a refusal is decided here, once.
#include <rdmalib/connection.hpp>
#include <rdmalib/errors.hpp>
#include <rdmalib/fabric.hpp>

#include "common/logging.hpp"

#include <algorithm>
#include <thread>

namespace rdmalib {

Connection Connection::connect(Fabric &fabric, const Address &remote, const void *private_data,
                               size_t private_len, std::chrono::milliseconds timeout,
                               const ConnectionOptions &options) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds backoff{20};
  for (uint32_t attempt = 0;; ++attempt) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const Clock::time_point start = Clock::now();
    auto ms = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    };
    logger().debug("connecting to {} over {} (attempt {}, {} ms left)", remote.to_string(),
                   fabric.provider(), attempt + 1, left.count());
    try {
      Connection c = connect_once(fabric, remote, private_data, private_len,
                                  std::max(left, std::chrono::milliseconds(1)), options);
      logger().debug("connected to {} over {} in {} ms", remote.to_string(), fabric.provider(),
                     ms());
      return c;
    } catch (const Error &e) {
      logger().debug("connecting to {} over {} failed after {} ms: {}", remote.to_string(),
                     fabric.provider(), ms(), e.what());
      // Only a refusal is worth another request, and only while the caller's
      // deadline leaves room for the pause and a useful attempt after it.
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (e.kind() != ErrorKind::Refused || attempt >= options.refused_retries ||
          left < 2 * backoff)
        throw;
    }
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

} // namespace rdmalib
