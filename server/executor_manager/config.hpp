// The executor manager's configuration (config/executor_manager.json).
//
// Strict like the device database: every error names the file and the JSON
// path of the offending key, unknown keys are rejected (a typo must not fall
// back to a default silently), and every value is range-checked here, once,
// so the rest of the manager can trust it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/sandbox_config.hpp"

namespace rfaas::manager {

/// A configuration file or a command-line value is wrong. what() names the
/// origin (file or option) and the key.
class ConfigError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Admission control of client connections (the "admission" object; see
/// admission.hpp). A connection is pending until it obtained an allocation.
struct AdmissionConfig {
  /// Pending connections in total; at the limit the oldest of the peer holding
  /// the most is closed to make room.
  uint32_t max_pending = 32;
  /// Pending connections per peer address; beyond it the peer is refused.
  uint32_t max_pending_per_peer = 8;
  /// Deadline from established to allocation granted, milliseconds (the
  /// steps before and after it wait at most deadlines_ms.connect).
  uint32_t request_ms = 5000;
  /// Log the admission counters every this many seconds when they changed
  /// (0: only at shutdown).
  uint32_t stats_interval_s = 60;
};

struct ManagerConfig {
  /// Device database (relative paths are resolved against the config file).
  std::string device_database;
  /// Device entry (name or IP address) to listen on.
  std::string device;
  /// Listening address; an empty host means the device's ip_address, port 0
  /// lets the operating system choose (printed in the readiness line).
  std::string listen_host;
  uint16_t listen_port = 0;

  /// Register with a resource manager at `address` (its fabric "host:port")
  /// and accept only clients holding one of its leases; false: standalone,
  /// every client is accepted.
  bool resource_manager_enabled = false;
  std::string resource_manager_address;
  /// The node secret shared with the resource manager (64 hex digits).
  std::string resource_manager_secret_file;
  /// Where the leases that ended on this node are kept (lease id and last
  /// expiry, one a line), so that their tokens stay refused after a restart
  /// of this manager; default: the secret file's path + ".ended".
  std::string resource_manager_ended_file;
  /// This node's name at the resource manager; empty: the host name.
  std::string resource_manager_node;
  /// How long one attempt to reach the resource manager may take. Apart from
  /// connect_ms: tcp;ofi_rxm needs over a second to connect on a loaded
  /// host. The attempt runs on a thread of its own, never in the manager's
  /// loop (rm_link.hpp).
  uint32_t resource_manager_connect_ms = 3000;
  /// How often live allocations' accounting is reported to the resource
  /// manager (so that a long lease shows its use before it ends); 0 = only
  /// when allocations end.
  uint32_t accounting_interval_ms = 60000;

  /// CPU ids handed to worker threads, one per leased core; distinct.
  std::vector<int> cores;
  /// Memory the manager may grant in total, MiB.
  uint32_t memory_mib = 1024;
  /// Concurrent allocations.
  uint32_t max_allocations = 4;

  /// Upper bounds on allocation requests (within the protocol's own limits).
  uint32_t max_input_slots = 16;
  uint32_t max_slot_size = 1048640;
  uint64_t max_library_size = 64ull << 20;
  /// Limit given to an executor whose request says memory_mib = 0.
  uint32_t default_memory_mib = 256;

  /// Fork executors from a pre-initialised zygote (true) or exec a fresh
  /// executor binary per allocation (false: slower cold start, for comparison).
  bool zygote = true;
  /// Executors the zygote keeps pre-started, already in their sandbox with
  /// their fabric open, for the next allocations ("executor.pool"; 0: each
  /// allocation forks its own). Each costs a process's memory while it waits
  /// (docs/runtime.md, "The executor pool").
  uint32_t executor_pool = 1;
  /// How executors are confined ("executor.sandbox", "executor.user", ...).
  server::SandboxConfig sandbox;

  /// Deadlines, milliseconds. connect_ms bounds every wait for one peer
  /// inside the manager's loop (accepting a connection, sending an answer),
  /// so it is at most 1000: the loop must react to SIGTERM within a second.
  uint32_t connect_ms = 500;
  uint32_t executor_start_ms = 10000;
  uint32_t workers_connected_ms = 10000;
  uint32_t library_loaded_ms = 10000;
  uint32_t shutdown_grace_ms = 2000;

  AdmissionConfig admission;

  /// spdlog level name ("trace", "debug", "info", "warn", "error", "off").
  std::string log_level = "info";
  /// Log each allocation's accounting when it ends.
  bool log_accounting = true;

  /// Parse JSON text; `origin` names it in errors, `base_dir` resolves
  /// relative paths. Throws ConfigError.
  static ManagerConfig parse(const std::string &json_text, const std::string &origin,
                             const std::string &base_dir);
  /// Load a file. Throws ConfigError (also when it cannot be read).
  static ManagerConfig load(const std::string &path);
};

/// Parse a CPU list: "3", "0-3", "0,2,4-6" (Linux cpulist syntax). Ids must be
/// 0..4095 and distinct. Throws ConfigError naming `origin` and the token.
std::vector<int> parse_core_list(const std::string &text, const std::string &origin);

} // namespace rfaas::manager
