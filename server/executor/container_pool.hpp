// Executors in containers: the `oci` and `command` sandbox kinds.
//
// The zygote cannot fork an executor into a container, so for these kinds
// it starts a container engine per executor instead:
//
//   oci       podman [oci.podman...] run --rm --name rfaas-<zygote>-<n>
//             --network host --pid private (host for shm) --user UID:GID
//             (the lease owner's, see "Who a container runs as")
//             --cap-drop all --security-opt no-new-privileges --read-only
//             --tmpfs /tmp --pids-limit --ulimit nofile --cgroup-parent
//             --preserve-fds 2 --log-driver passthrough
//             [the fabric's devices and /dev/shm, the host's /usr and the
//             executor's directories read-only] [oci.run_options...]
//             IMAGE <executor> <executor args>
//   command   the operator's argv template (`executor.command`), with the
//             placeholders below replaced.
//
// Either way the executor inside runs `executor --spare-fd 3 --lifeline-fd
// 4 ...`: it opens its fabric, says so with one byte on fd 3 (a socket to
// the zygote), then reads its LaunchSpec from fd 3 until end of file and
// serves the allocation (the spare protocol of zygote.hpp). Fd 4 is its
// lifeline, a socket whose other end only the zygote holds: when it closes
// (the zygote closed it to kill the executor, or died) the executor exits,
// so an executor never outlives its zygote, although its container's
// parent is the engine's monitor, not the zygote. An executor that ends
// writes its exit code there (4 bytes): the zygote reports it at once, not
// when the engine has torn the container down (hundreds of milliseconds
// later), and not the engine's own status (a signal the engine got while
// tearing down would read as the executor's).
//
// An allocation may name another image of the operator's allow-list
// (AllocationRequest::image, executor.oci.images): it gets a container of
// that image started for it (the pool holds the default image's).
//
// Who a container runs as: the rules of the namespaces kind
// (Sandbox::identity_for). A zygote running as root starts the executor of
// a lease whose owner the node knows as that uid with its account's primary
// gid (podman --user, the command template's {uid} {gid}), that of an
// anonymous lease or one owned by root as executor.user. A zygote that is
// not root (a rootless engine) runs every container as executor.user
// inside the engine's user namespace; on shm every container keeps the
// zygote's uid (the provider connects one uid only).
//
// oci keeps `oci.pool` containers started ahead. Their executor runs as its
// uid from the engine's start on, without any capability: a container
// cannot change its uid when it is handed over. The pool therefore holds
// containers of one uid, that of the last allocation started (an anonymous
// lease's before the first): an allocation whose executor runs as that uid
// takes a waiting container, another gets a container started for it, and
// the refill then lets the waiting containers of the previous uid go and
// starts the pool's for the new one. A stream of allocations by one owner
// stays warm; each change of owner costs a container start (cold) and the
// start of the waiting containers that are let go.
//
// An allocation goes to a waiting container that has answered (its fabric
// is open); its leased cores are written into the cpuset of the container's
// cgroup (podman made it below the group the zygote made for it), its
// memory and process limits into that group. With none ready, a container
// is started for the allocation, with its limits on podman's command line.
// The pool is refilled a little after each allocation started.
//
// Placeholders of the command template (an element equal to one of the
// list placeholders is replaced by several elements, others are replaced
// inside the element):
//   {executor}        the executor's path (the host's: bind it in)
//   {executor_args}   the executor's arguments (several elements)
//   {name}            a name unique on the node (rfaas-<zygote>-<n>)
//   {cores}           the leased CPU ids, "2,3"
//   {memory_mib}      the allocation's memory, MiB
//   {max_processes} {max_open_files} {tmp_mib}
//                     executor.max_processes ...
//   {uid} {gid}       who the executor runs as (see above: the lease
//                     owner's uid and primary gid, or executor.user)
//   {cgroup_parent}   the group the zygote made for this executor
//                     ("/rfaas/executor-1-2"). A template that names it is
//                     refused at start-up where no cgroup can be made
//                     (usable()), and an allocation whose group cannot be
//                     made fails: never an empty value
//   {host_path}       the element is repeated per path the fabric needs
//                     (/dev/shm, /dev/infiniband...)
//   {code_dir}        the element is repeated per directory of the
//                     executor's code outside /usr
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <rdmalib/device.hpp>
#include <rdmalib/fabric.hpp>

#include "common/launch_spec.hpp"
#include "common/sandbox_config.hpp"
#include "executor/cgroup.hpp"
#include "executor/sandbox.hpp"

namespace rfaas::executor_process {

class ContainerPool {
public:
  using Clock = std::chrono::steady_clock;

  /// `child_setup` runs in each forked child before it executes the engine
  /// (the zygote's own cleanup: signal mask, descriptors, death signal).
  /// `self_exe` is the executor binary on the host.
  ContainerPool(const server::SandboxConfig &config, const rdmalib::DeviceConfig &device,
                const Sandbox &sandbox, std::string self_exe, std::function<void()> child_setup);
  ~ContainerPool();
  ContainerPool(const ContainerPool &) = delete;
  ContainerPool &operator=(const ContainerPool &) = delete;

  /// One line for the manager's start-up log.
  std::string describe() const;

  /// Whether executors can start as configured; false with `why` when the
  /// configuration cannot work here (a command template naming
  /// {cgroup_parent} where no cgroup can be made). The zygote refuses to
  /// start then.
  bool usable(std::string &why) const;
  /// Start the pool (oci) once the zygote's loop runs.
  void start();
  /// Give an allocation an executor, run as its lease's owner where the
  /// rules above allow: a waiting container of the pool started as that
  /// uid, or one started now. Returns the pid of its engine process (the
  /// zygote's child that stands for the executor: it ends when the executor
  /// did, with its exit code), or -1 with `why`. `from_pool`: a waiting
  /// container took it.
  pid_t launch(const std::string &spec_text, const server::LaunchSpec &spec, bool &from_pool,
               std::string &why);
  /// Deliver `sig` to the executor of engine process `pid`: SIGKILL closes
  /// its lifeline (the engine cannot pass SIGKILL on), others go to the
  /// engine, which passes them to the executor.
  void signal(pid_t pid, int sig);
  /// The zygote reaped `pid`. True when it was a container of the pool that
  /// never had an allocation (reported to nobody).
  bool reaped(pid_t pid, int status);
  /// Append the lifelines to watch (executors with an allocation).
  void poll_fds(std::vector<pollfd> &fds) const;
  /// After poll() on `fds`: the executors that wrote their exit code, as
  /// (engine pid, exit code); their engines are then reaped without a
  /// report.
  std::vector<std::pair<pid_t, int>> collect_exits(const std::vector<pollfd> &fds);
  /// Milliseconds until tick() has work (for the zygote's poll), or -1.
  int timeout_ms() const;
  /// Start pool containers that are due.
  void tick();
  /// Let everything go: executors and waiting containers exit; their
  /// engines end shortly after.
  void shutdown();
  /// No engine is left to reap.
  bool idle() const { return waiting_.empty() && bound_.empty(); }

private:
  struct Container {
    std::string name;
    int socket = -1;   ///< the zygote's end of the spare protocol
    int lifeline = -1; ///< the zygote's end; closing it ends the executor
    bool ready = false;
    /// Let go (its fds closed): reaped without a report, never bound.
    bool dropped = false;
    /// Its exit code came over the lifeline (its engine's is not reported).
    bool reported = false;
    ExecutorCgroup cgroup;
    /// Who its executor runs as (fixed when its engine starts).
    ExecutorIdentity who;
  };

  /// Who the executor of a lease owned by `owner_uid` runs as (the rules
  /// above); false with `why` when this node has no account for the owner.
  bool identity_for(uint32_t owner_uid, ExecutorIdentity &out, std::string &why) const;
  /// Waiting containers that are neither let go nor bound.
  size_t live_waiting() const;

  /// Fork and exec the engine for a new container; its pid, or -1.
  pid_t start_container(Container &c, const server::LaunchSpec *spec, const std::string &image,
                        std::string &why);
  std::vector<std::string> oci_argv(const Container &c, const server::LaunchSpec *spec,
                                    const std::string &image) const;
  std::vector<std::string> command_argv(const Container &c, const server::LaunchSpec &spec) const;
  std::vector<std::string> executor_args() const;
  std::string executor_path() const;
  /// Close its descriptors: a waiting executor exits, a bound one too.
  void close_container(Container &c);

  server::SandboxConfig config_;
  rdmalib::DeviceConfig device_;
  const Sandbox &sandbox_;
  std::string self_;
  std::function<void()> child_setup_;
  std::vector<std::string> host_paths_;
  bool host_pids_ = false;
  bool keep_uid_ = false;
  /// The engine runs as root: containers may run as the lease's owner.
  bool root_ = false;
  /// Who the pool's containers run as: the last allocation's executor.
  ExecutorIdentity pool_who_;
  uint64_t seq_ = 0;
  /// Started ahead, no allocation yet, by engine pid.
  std::map<pid_t, Container> waiting_;
  /// With an allocation, by engine pid.
  std::map<pid_t, Container> bound_;
  /// When the pool is refilled next (time_point{}: not scheduled).
  Clock::time_point refill_due_{};
  /// Off after a container of the pool ended before use (the engine or the
  /// image does not work: allocations then start their own, which report).
  bool pool_on_ = true;
};

} // namespace rfaas::executor_process
