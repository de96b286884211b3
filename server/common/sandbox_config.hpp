// How an executor manager confines the executors it starts: the
// `executor.sandbox` part of its configuration, handed to its zygote (which
// applies it, server/executor/sandbox.hpp) as "key value" lines in hex on its
// command line. Shared by both sides so that they agree on one form.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rfaas::server {

enum class SandboxKind {
  /// The executor is a plain child of the zygote, as the manager's user with
  /// the manager's view of the node: for a single trusted user only.
  Process,
  /// New user, mount, PID, IPC, UTS and cgroup namespaces, a minimal
  /// read-only file system, an unprivileged uid without capabilities,
  /// no_new_privs, a seccomp filter and a cgroup (or rlimits) per allocation.
  Namespaces,
};

const char *to_string(SandboxKind k) noexcept;
/// "process" or "namespaces"; throws std::invalid_argument otherwise.
SandboxKind parse_sandbox_kind(const std::string &text);

struct SandboxConfig {
  SandboxKind kind = SandboxKind::Namespaces;
  /// The uid and gid executors run as when the zygote runs as root (a zygote
  /// of another user runs them as itself). Never 0 in a sandbox.
  uid_t uid = 65534;
  gid_t gid = 65534;
  /// The cgroup (relative to each hierarchy's root) under which one cgroup
  /// per executor is made, where the manager may create cgroups.
  std::string cgroup_parent = "rfaas";
  /// Processes and threads per executor (pids.max, else RLIMIT_NPROC).
  uint32_t max_processes = 256;
  /// Open descriptors per executor (RLIMIT_NOFILE, soft and hard).
  uint32_t max_open_files = 1024;
  /// Size of the executor's private /tmp, MiB.
  uint32_t tmp_mib = 64;
  /// Install the seccomp filter before the client's library is loaded.
  bool seccomp = true;

  /// The text form (one "key value" line per field). Never fails.
  std::string serialize() const;
  /// Parse the text form; throws std::invalid_argument naming the bad line.
  static SandboxConfig parse(const std::string &text);
};

} // namespace rfaas::server
