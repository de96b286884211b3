// The zygote: a pre-initialised executor parent that forks one executor per
// allocation, so that an allocation does not pay for loading libfabric and its
// providers (~0.2-0.3 s on Debian) in a fresh process.
//
// The executor manager starts `executor --zygote` once, with a pipe on its
// stdin (commands) and one on its stdout (events); logs go to stderr. Lines:
//
//   manager -> zygote   spawn <bytes>\n<LaunchSpec text of that many bytes>
//                       signal <allocation id> <signal number>\n
//   zygote -> manager   ready <sandbox and pool description>\n
//                       pooled <pid> <secret, hex>\n
//                       unpooled <pid>\n
//                       started <allocation id> <pid> [pooled]\n
//                       failed <allocation id> <reason...>\n
//                       exited <allocation id> <pid> <exit code | -signal>\n
//
// The zygote is the executors' parent: it reaps them (no zombies) and signals
// them only while they are unreaped, so a recycled pid is never hit. It dies
// with the manager (PR_SET_PDEATHSIG), and its executors die with it. When
// its stdin closes it kills and reaps its executors and exits.
//
// The zygote keeps a pool of executors forked ahead (executor_pool.hpp; its
// size is the manager's executor.pool, 0 for none): each enters the sandbox,
// opens its own fabric and, where opening an endpoint is slow
// (rdmalib::Fabric::prepare returns true: shm), the endpoints of its links
// (they must be opened in the process that uses them), then waits on a
// socket for a LaunchSpec. A spawn goes to the longest-waiting ready one
// ("started ... pooled"), bound to the allocation's limits first, else to a
// fresh fork; the replacement is forked a little later. A pooled executor is
// named "executor-spare" until it takes an allocation; it dies with the
// zygote and is reaped without an "exited" line.
//
// While it waits, a pooled executor connects its accounting link to the
// manager, presenting a random secret of its own ("pooled" line: the manager
// accepts that secret once); "started ... pooled" tells the manager which
// allocation that link now belongs to, and "unpooled" that a pooled executor
// is gone before taking one (its secret is void).
#pragma once

#include <rdmalib/device.hpp>

#include "common/sandbox_config.hpp"

#include <cstdint>
#include <string>

namespace rfaas::executor_process {

/// Where the manager listens for its executors' accounting links.
struct ManagerAddress {
  std::string host;
  uint16_t port = 0; ///< 0: unknown; pooled executors connect at allocation
  uint32_t connect_ms = 0;
};

/// Run the zygote loop until stdin closes. `warm_device` is opened once and
/// closed to load and initialise the backend's providers before any fork;
/// when `exec_each` is true every executor is started with execv() of
/// `self_exe` instead (cold start, for comparison; no pool then). Every
/// executor is confined as `sandbox` says (sandbox.hpp). `pool` executors
/// are kept pre-started (0: none); each connects its accounting link to
/// `manager` while it waits (port 0: not), and one that has not reported
/// ready within `member_start_ms` of its fork (0: no bound) is discarded and
/// replaced. Returns the exit code.
int run_zygote(const rdmalib::DeviceConfig &warm_device, bool exec_each,
               const std::string &self_exe, const server::SandboxConfig &sandbox, size_t pool,
               const ManagerAddress &manager, uint32_t member_start_ms = 0);

/// An executor started in a container (container_pool.hpp): open the
/// fabric for `device`, say so with one byte on socket `fd`, then read a
/// LaunchSpec from `fd` until end of file and serve it (none: exit 0).
/// Returns the exit code.
int run_waiting_executor(int fd, const rdmalib::DeviceConfig &device);

/// Run one executor from the LaunchSpec text readable on `fd`
/// (`executor --spec-fd N`). Returns the exit code.
int run_from_spec_fd(int fd);

} // namespace rfaas::executor_process
