// rm_fleet's simulated executor managers ("hosts"), in a file of their own:
// they use the executor manager's resource-manager link, whose headers
// cannot share a translation unit with librfaas's public ones (both declare
// rfaas::server, a namespace on one side and a struct on the other).
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <rdmalib/device_config.hpp>

namespace rfaas::fleet {

/// A simulated node: its name and the secret the operator added it with.
struct NodeSpec {
  std::string name;
  std::array<uint8_t, 32> secret{};
};

/// What one host process saw, sent to the parent when it stops.
struct HostResult {
  uint32_t links = 0;
  uint32_t registered = 0;
  uint64_t notices = 0;
  uint64_t reports = 0;
  uint64_t rss_kib = 0;
  uint64_t fds = 0;
  uint64_t rss_kib_before = 0; ///< before the fabric and the first link
  uint64_t fds_before = 0;
};

struct FleetSetup {
  rdmalib::DeviceConfig device;
  std::string rm_address;
  uint32_t cores = 8;
  uint64_t memory_mib = 65536;
  std::chrono::milliseconds connect_timeout{30000};
};

/// One host: the executor manager's link for each of `nodes`, all in this
/// process and polled by its one thread, until `stop_fd` becomes readable;
/// then the HostResult is written to `result_fd` and the process exits at
/// once (no teardown). Returns only by throwing.
[[noreturn]] void run_host(const FleetSetup &s, const std::vector<NodeSpec> &nodes, int stop_fd,
                           int result_fd);

/// A process's CPU time (user + system), resident set and open descriptors.
struct ProcSample {
  double cpu_s = 0;
  uint64_t rss_kib = 0;
  size_t fds = 0;
};
/// Reads /proc/PID; throws when the process is gone.
ProcSample sample(pid_t pid);

/// Writes all of `buf` (retrying short writes); false on an error.
bool write_full(int fd, const void *buf, size_t len);
/// True once the other end closed (or wrote to) the pipe `fd`.
bool told_to_stop(int fd);

} // namespace rfaas::fleet
