// Executors in containers: the `oci` and `command` sandbox kinds.
//
// The zygote cannot fork an executor into a container, so for these kinds
// it starts a container engine per executor instead:
//
//   oci       podman [oci.podman...] run --rm --name rfaas-<zygote>-<n>
//             --network host --pid private (host for shm) --user UID:GID
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
// oci keeps `oci.pool` containers started ahead. An allocation goes to one
// that has answered (its fabric is open); its leased cores are written into
// the cpuset of the container's cgroup (podman made it below the group the
// zygote made for it), its memory and process limits into that group. With
// none ready, a container is started for the allocation, with its limits on
// podman's command line. The pool is refilled a little after each
// allocation started.
//
// Placeholders of the command template (an element equal to one of the
// list placeholders is replaced by several elements, others are replaced
// inside the element):
//   {executor}        the executor's path (the host's: bind it in)
//   {executor_args}   the executor's arguments (several elements)
//   {name}            a name unique on the node (rfaas-<zygote>-<n>)
//   {cores}           the leased CPU ids, "2,3"
//   {memory_mib}      the allocation's memory, MiB
//   {max_processes} {max_open_files} {tmp_mib} {uid} {gid}
//                     executor.max_processes ... and executor.user
//   {cgroup_parent}   the group the zygote made for this executor
//                     ("/rfaas/executor-1-2"), empty where none
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

namespace rfaas::executor_process {

class Sandbox;

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

  /// Start the pool (oci) once the zygote's loop runs.
  void start();
  /// Give an allocation an executor: a waiting container of the pool, or
  /// one started now. Returns the pid of its engine process (the zygote's
  /// child that stands for the executor: it ends when the executor did, with
  /// its exit code), or -1 with `why`.
  pid_t launch(const std::string &spec_text, const server::LaunchSpec &spec, std::string &why);
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
  };

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
