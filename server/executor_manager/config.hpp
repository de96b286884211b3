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

namespace rfaas::manager {

/// A configuration file or a command-line value is wrong. what() names the
/// origin (file or option) and the key.
class ConfigError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
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
  /// This node's name at the resource manager; empty: the host name.
  std::string resource_manager_node;
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
  uint32_t max_slot_size = 1048608;
  uint64_t max_library_size = 64ull << 20;
  /// Limit given to an executor whose request says memory_mib = 0.
  uint32_t default_memory_mib = 256;

  /// Fork executors from a pre-initialised zygote (true) or exec a fresh
  /// executor binary per allocation (false: slower cold start, for comparison).
  bool zygote = true;

  /// Deadlines, milliseconds.
  uint32_t connect_ms = 5000;
  uint32_t executor_start_ms = 10000;
  uint32_t workers_connected_ms = 10000;
  uint32_t library_loaded_ms = 10000;
  uint32_t shutdown_grace_ms = 2000;

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
