// How an executor is confined: the one place that says what a client's
// functions can and cannot reach on a node.
//
// The zygote (zygote.cpp) makes a cgroup for each executor before it forks
// it; the forked child calls Sandbox::enter(), which for the `namespaces`
// kind:
//   1. joins the cgroup and, when the zygote runs as root, becomes the
//      lease owner's uid (the uid the resource manager authenticated with
//      MUNGE, which the lease token covers) with that account's primary
//      gid, or for an anonymous lease (and one of root) the configured
//      unprivileged executor.user (no supplementary groups either way);
//   2. sets no_new_privs and unshares user, mount, IPC, UTS, cgroup and PID
//      namespaces, mapping only its own uid and gid into the new user
//      namespace;
//   3. forks once more: the new process is PID 1 of the new PID namespace
//      (where the provider allows: shm names and watches peers by pid, so
//      there the host's PID namespace stays, without /proc inside, and the
//      process in between, a subreaper, kills what the executor left)
//      and becomes the executor; the process in between stays in the
//      zygote's namespace (named "executor-box"), passes SIGTERM on, and
//      exits with the executor's
//      status, so the zygote and the manager see one executor as before.
//      When PID 1 ends, the kernel kills everything it or its library
//      started;
//   4. builds a minimal root file system on a tmpfs: read-only binds of /usr
//      (and the /bin, /lib... links into it), of the directories holding the
//      executor and the libraries it runs, of a few files of /etc the C
//      library reads, and of the paths the fabric needs (/dev/shm for shm,
//      /dev/infiniband and /sys for verbs); a fresh /proc
//      of the new PID namespace; /dev with null, zero, full, random and
//      urandom; a private size-limited /tmp. It then pivots into it, so the
//      manager's configuration, secret and database are not there to read;
//   5. drops every capability and the bounding set, sets its rlimits
//      (descriptors, processes where no pids cgroup limits them), and makes
//      itself non-dumpable.
// The network namespace stays the host's: the fabric needs it. The seccomp
// filter (seccomp_filter.hpp) comes later, from the executor itself, once
// its links are up.
//
// The `process` kind does none of this (a trusted single user only); the
// `oci` and `command` kinds start a container engine instead of forking
// (container_pool.hpp), which uses this class for the executor's code
// directories, its cgroup and who it runs as (identity_for) only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include <rdmalib/fabric.hpp>

#include "common/sandbox_config.hpp"
#include "executor/cgroup.hpp"

namespace rfaas::executor_process {

/// Who an executor runs as.
struct ExecutorIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  /// The lease's owner (else executor.user, or the zygote's own uid).
  bool owner = false;
  bool operator==(const ExecutorIdentity &o) const { return uid == o.uid && gid == o.gid; }
};

class Sandbox {
public:
  /// `needs`: what the fabric needs inside (rdmalib::Fabric::
  /// confinement_needs): host paths to see, and whether its peers must share
  /// a uid (then executors keep the zygote's uid, without capabilities).
  /// Probes cgroup support once.
  Sandbox(server::SandboxConfig config, rdmalib::Fabric::ConfinementNeeds needs);

  const server::SandboxConfig &config() const { return config_; }
  /// One line for the manager's start-up log: kind, uid, namespaces,
  /// seccomp, and which limits apply.
  std::string describe() const;

  /// In the zygote, before the fork: the cgroup of the next executor (empty
  /// where none can be made; rlimits apply then). `name` is unique per
  /// executor.
  ExecutorCgroup make_cgroup(const std::string &name) const;

  /// In the zygote, before the fork: who the executor of a lease owned by
  /// `owner_uid` (protocol::kAnonymousUid: nobody known) runs as. As root
  /// with a provider that lets processes of different uids connect: the
  /// owner with its account's primary gid (false with `error` when this node
  /// has no account for it), or executor.user for an anonymous lease and
  /// for owner uid 0 (root of a client host is not root here). Otherwise
  /// the zygote's own uid and gid: a manager that is not root cannot change
  /// uid, and on shm the provider connects one uid only.
  bool identity_for(uint32_t owner_uid, ExecutorIdentity &out, std::string &error) const;

  /// In the forked child. Returns true in the confined process; false with
  /// `error` when confinement failed (the caller exits: an executor never
  /// runs less confined than configured). For the namespaces kind the
  /// process in between never returns.
  bool enter(const ExecutorCgroup &cgroup, const ExecutorIdentity &who, std::string &error) const;

  /// Whether cgroups limit memory, cores and processes (else rlimits do).
  const CgroupSupport &cgroups() const { return cgroups_; }
  /// Directories of the executor's code outside /usr (bound read-only into
  /// a sandbox or a container).
  const std::vector<std::string> &code_dirs() const { return code_dirs_; }
  /// The files of /etc that the C library and the fabric's libraries read
  /// (names below /etc; nothing else of it is shown to an executor).
  static const std::vector<const char *> &etc_files();

private:
  bool enter_namespaces(const ExecutorIdentity &who, std::string &error) const;
  bool build_root(std::string &error) const;
  bool populate(const std::string &root, const std::string &host, std::string &error) const;
  bool set_limits(bool pids_limited, std::string &error) const;

  server::SandboxConfig config_;
  std::vector<std::string> host_paths_;
  /// Directories of the executor binary and of the shared objects it runs
  /// (bound read-only inside).
  std::vector<std::string> code_dirs_;
  CgroupSupport cgroups_;
  bool root_ = false;
  /// The provider connects only processes of one uid: keep the zygote's.
  bool keep_uid_ = false;
  /// The provider names and watches peers by pid: keep the host's PID
  /// namespace (the process in between then reaps and kills what the
  /// executor leaves behind, and the executor has no /proc).
  bool host_pids_ = false;
};

} // namespace rfaas::executor_process
