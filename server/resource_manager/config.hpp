// The resource manager's configuration (config/resource_manager.json,
// described in config/README.md and docs/resource_manager.md). Read strictly:
// an unknown key, a wrong type or a value out of range is an error naming the
// file, the key and what is allowed.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "resource_manager/registry.hpp"

namespace rfaas::rm {

class ConfigError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct ResourceManagerConfig {
  /// SQLite file; relative paths are relative to the configuration file.
  std::string database = "resource_manager.sqlite";
  std::string http_host = "127.0.0.1";
  /// 0: the OS chooses; the readiness line on stderr prints the port.
  uint16_t http_port = 8080;
  uint32_t http_threads = 2;
  /// Bearer token for mutating REST calls (from http.token or the first line
  /// of http.token_file).
  std::string admin_token;
  RegistryOptions registry;
  /// How often leases are checked for expiry and nodes for heartbeats.
  uint64_t tick_ms = 250;
  std::string log_level = "info";

  /// Reads `path`. Throws ConfigError.
  static ResourceManagerConfig load(const std::string &path);
  /// Parses JSON text; `origin` names it in errors and relative paths are
  /// resolved against `base_dir`.
  static ResourceManagerConfig parse(const std::string &text, const std::string &origin,
                                     const std::string &base_dir);
};

} // namespace rfaas::rm
