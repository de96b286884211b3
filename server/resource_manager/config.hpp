// The resource manager's configuration (config/resource_manager.json,
// described in config/README.md and docs/resource_manager.md). Read strictly
// with the reader every configuration file of rFaaS goes through
// (rdmalib::ConfigNode): an unknown key, a wrong type or a value out of range
// is one line, "<file>: <JSON path>: <problem>; <expected>".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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
  /// After a pass of the loop that did work, how long it keeps passing over
  /// the links without sleeping before it sleeps in poll(2) (Loop::
  /// set_busy_poll); 0: it sleeps as soon as a pass finds nothing.
  uint32_t busy_poll_us = 50;
};

/// nodes.slurm: the slurm node provider (docs/slurm.md, pilot jobs).
struct SlurmProviderConfig {
  /// Executor-manager nodes kept between these bounds (whole pilots).
  uint32_t min_nodes = 0;
  uint32_t max_nodes = 1;
  /// Nodes of each pilot job (sbatch --nodes); one executor manager each.
  uint32_t nodes_per_job = 1;
  /// A pilot whose nodes all held no lease for this long is cancelled
  /// (unless that would go below min_nodes).
  uint64_t idle_timeout_ms = 300'000;
  /// sbatch's --partition, --account (empty: the site's default) and --time.
  std::string partition;
  std::string account;
  std::string time_limit = "01:00:00";
  /// More "#SBATCH" lines, each without the prefix ("--exclusive").
  std::vector<std::string> sbatch;
  /// The pilots' job name (squeue lists the provider's jobs by it).
  std::string job_name = "rfaas-pilot";
  /// Pilot scripts, secrets and logs, one directory per pilot; on a file
  /// system the compute nodes see.
  std::string work_dir;
  /// The rfaas-slurm script the pilots run, and its options (provider,
  /// interface, cores...); the resource manager adds --pilot,
  /// --resource-manager, --secret-file and --work-dir.
  std::string rfaas_slurm;
  std::vector<std::string> pilot_options;
  /// Where the pilots' executor managers reach this resource manager
  /// (empty: the fabric's listening address).
  std::string resource_manager_address;
  /// What a client that must wait for a pilot is told to wait.
  uint64_t retry_after_ms = 1000;
  /// How often squeue is asked about the pilots.
  uint64_t poll_ms = 1000;
  /// Deadline of each sbatch, squeue or scancel.
  uint64_t command_timeout_ms = 10'000;
  /// A running pilot whose executor managers have not all registered in
  /// this time is cancelled.
  uint64_t start_timeout_ms = 300'000;
  /// Directory of sbatch, squeue and scancel (empty: PATH).
  std::string slurm_bin_dir;
};

/// nodes.provider: where executor-manager nodes come from.
enum class NodeProviderKind { Static, Slurm };

struct ResourceManagerConfig {
  /// SQLite file; relative paths are relative to the configuration file.
  std::string database = "resource_manager.sqlite";
  std::string http_host = "127.0.0.1";
  /// 0: the OS chooses; the readiness line on stderr prints the port.
  uint16_t http_port = 8080;
  uint32_t http_threads = 2;
  /// Longest a REST request waits for the loop to take it before 503.
  uint64_t http_loop_timeout_ms = 5000;
  /// Most open REST connections (http.max_connections); one more gets a 503.
  uint32_t http_max_connections = 256;
  /// A REST connection silent for this long is closed (http.idle_timeout_ms).
  uint64_t http_idle_timeout_ms = 60'000;
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
  NodeProviderKind node_provider = NodeProviderKind::Static;
  SlurmProviderConfig slurm;
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
