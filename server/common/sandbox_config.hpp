// How an executor manager confines the executors it starts: the
// `executor.sandbox` part of its configuration, handed to its zygote (which
// applies it, server/executor/sandbox.hpp) as "key value" lines in hex on its
// command line. Shared by both sides so that they agree on one form.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace rfaas::server {

enum class SandboxKind {
  /// The executor is a plain child of the zygote, as the manager's user with
  /// the manager's view of the node: for a single trusted user only.
  Process,
  /// New user, mount, PID, IPC, UTS and cgroup namespaces, a minimal
  /// read-only file system, an unprivileged uid without capabilities,
  /// no_new_privs, a seccomp filter and a cgroup (or rlimits) per allocation.
  Namespaces,
  /// Inside an OCI image through podman: its own mount, PID, IPC and UTS
  /// namespaces, the host's network, an unprivileged uid without
  /// capabilities, no_new_privs, the seccomp filter, the cgroup podman makes
  /// (server/executor/container_launcher.hpp). Containers are started ahead
  /// and wait for their allocation (a pool).
  Oci,
  /// The operator's own argv template (Apptainer, Sarus, Docker, podman...):
  /// one start per allocation, nothing added by rFaaS but the seccomp filter.
  Command,
};

const char *to_string(SandboxKind k) noexcept;
/// "process", "namespaces", "oci" or "command"; throws std::invalid_argument otherwise.
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

  /// oci: the image executors run in (its name as podman knows it).
  std::string oci_image;
  /// oci: the images a client may name per allocation (AllocationRequest::
  /// image n is the n-th; 0 is oci_image).
  std::vector<std::string> oci_images;
  /// oci: the podman command and its global options (before "run"); empty
  /// means {"podman"}.
  std::vector<std::string> oci_podman;
  /// oci: options added to every "podman run" (a site's --ulimit, --device...).
  std::vector<std::string> oci_run_options;
  /// oci: containers kept started ahead, waiting for an allocation.
  uint32_t oci_pool = 1;
  /// oci: bind the host's /usr and the executor's directories read-only
  /// into the container (an image that carries no rFaaS of its own); else
  /// the image holds the executor at oci_executor.
  bool oci_host_code = true;
  /// oci, without oci_host_code: the executor's path inside the image.
  std::string oci_executor;
  /// command: the argv template (placeholders in container_launcher.hpp).
  std::vector<std::string> command;

  /// The text form (one "key value" line per field; a list is one line per
  /// element, in order). Never fails.
  std::string serialize() const;
  /// Parse the text form; throws std::invalid_argument naming the bad line.
  static SandboxConfig parse(const std::string &text);
};

} // namespace rfaas::server
