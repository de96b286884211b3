// The resource manager's configuration (config/resource_manager.json,
// described in config/README.md and docs/resource_manager.md). Read strictly
// with the reader every configuration file of rFaaS goes through
// (rdmalib::ConfigNode): an unknown key, a wrong type or a value out of range
// is one line, "<file>: <JSON path>: <problem>; <expected>".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "resource_manager/client_auth.hpp"
#include "resource_manager/registry.hpp"

namespace rfaas::rm {

class ConfigError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The fabric side: where executor managers register and clients lease.
struct FabricConfig {
  /// False when the configuration has no "fabric" block (REST only).
  bool enabled = false;
  /// Device database (relative paths: relative to the configuration file)
  /// and the entry in it to listen on, like the executor manager's.
  std::string device_database;
  std::string device;
  /// Listening address; an empty host means the device's ip_address, port 0
  /// lets the OS choose (the readiness line prints the real one).
  std::string host;
  uint16_t port = 0;
  /// Longest the loop waits for one connection to complete its setup.
  uint64_t accept_timeout_ms = 1000;
  /// Heartbeat period asked of the nodes (NodeRegistered::heartbeat_ms).
  uint32_t heartbeat_ms = 1000;
  /// How far a registration's timestamp may be from the resource manager's
  /// clock.
  uint64_t registration_window_ms = 300'000;
  /// A connection that has not said what it is within this time is closed.
  uint64_t idle_timeout_ms = 10'000;
  /// Most open connections (nodes and clients together).
  uint32_t max_connections = 1024;
  /// Of max_connections, how many clients may never take: they stay free
  /// for nodes (registering again after a restart, say) however many
  /// clients connect.
  uint32_t reserved_for_nodes = 16;
  /// A client connection that has sent nothing for this long is closed (its
  /// leases stay; librfaas connects again for its next call).
  uint64_t client_idle_timeout_ms = 3'600'000;
  /// How lease requests are authenticated (top-level "auth"): none (clients
  /// are anonymous) or munge (a MUNGE credential of this realm in each).
  ClientAuthMode auth = ClientAuthMode::None;
  /// munged's socket (top-level "munge_socket"); empty: libmunge's default.
  std::string munge_socket;
};

struct ResourceManagerConfig {
  /// SQLite file; relative paths are relative to the configuration file.
  std::string database = "resource_manager.sqlite";
  std::string http_host = "127.0.0.1";
  /// 0: the OS chooses; the readiness line on stderr prints the port.
  uint16_t http_port = 8080;
  uint32_t http_threads = 2;
  /// Longest a REST request waits for the loop to take it before 503.
  uint64_t http_loop_timeout_ms = 5000;
  /// Bearer token for mutating REST calls (from http.token or the first line
  /// of http.token_file); it also reads everything.
  std::string admin_token;
  /// Optional bearer token that reads nodes, leases and accounting but
  /// changes nothing (http.read_token or http.read_token_file).
  std::string read_token;
  /// Whether GET /health and GET /metrics answer without a token
  /// (http.open_endpoints; both by default).
  bool open_health = true;
  bool open_metrics = true;
  RegistryOptions registry;
  FabricConfig fabric;
  /// How often leases are checked for expiry and nodes for heartbeats.
  uint64_t tick_ms = 250;
  std::string log_level = "info";

  /// Reads `path`. Throws ConfigError (also when the file cannot be read).
  static ResourceManagerConfig load(const std::string &path);
  /// Parses JSON text; `origin` names it in errors and relative paths are
  /// resolved against `base_dir`.
  static ResourceManagerConfig parse(const std::string &text, const std::string &origin,
                                     const std::string &base_dir);
};

} // namespace rfaas::rm
