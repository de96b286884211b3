// The zygote: a pre-initialised executor parent that forks one executor per
// allocation, so that an allocation does not pay for loading libfabric and its
// providers (~0.2-0.3 s on Debian) in a fresh process.
//
// The executor manager starts `executor --zygote` once, with a pipe on its
// stdin (commands) and one on its stdout (events); logs go to stderr. Lines:
//
//   manager -> zygote   spawn <bytes>\n<LaunchSpec text of that many bytes>
//                       signal <allocation id> <signal number>\n
//   zygote -> manager   started <allocation id> <pid>\n
//                       failed <allocation id> <reason...>\n
//                       exited <allocation id> <pid> <exit code | -signal>\n
//
// The zygote is the executors' parent: it reaps them (no zombies) and signals
// them only while they are unreaped, so a recycled pid is never hit. It dies
// with the manager (PR_SET_PDEATHSIG), and its executors die with it. When
// its stdin closes it kills and reaps its executors and exits.
//
// Where opening an endpoint is slow (rdmalib::Fabric::prepare returns true:
// shm), the zygote keeps one spare executor forked ahead: it opens its own
// fabric and prepares the endpoints of its links (they must be opened in the
// process that uses them), then waits on a socket for the next LaunchSpec.
// A spawn goes to the spare when one waits, and the next spare is forked a
// little later. A spare reports at once whether prepare() did anything; if
// not, the zygote kills it and forks per allocation from then on, so other
// providers pay nothing. A spare is named "executor-spare" until it takes an
// allocation; it dies with the zygote and is reaped without an "exited" line.
#pragma once

#include <rdmalib/device.hpp>

#include "common/sandbox_config.hpp"

#include <string>

namespace rfaas::executor_process {

/// Run the zygote loop until stdin closes. `warm_device` is opened once and
/// closed to load and initialise the backend's providers before any fork;
/// when `exec_each` is true every executor is started with execv() of
/// `self_exe` instead (cold start, for comparison). Every executor is
/// confined as `sandbox` says (sandbox.hpp). Returns the exit code.
int run_zygote(const rdmalib::DeviceConfig &warm_device, bool exec_each,
               const std::string &self_exe, const server::SandboxConfig &sandbox);

/// An executor started in a container (container_pool.hpp): open the
/// fabric for `device`, say so with one byte on socket `fd`, then read a
/// LaunchSpec from `fd` until end of file and serve it (none: exit 0).
/// Returns the exit code.
int run_waiting_executor(int fd, const rdmalib::DeviceConfig &device);

/// Run one executor from the LaunchSpec text readable on `fd`
/// (`executor --spec-fd N`). Returns the exit code.
int run_from_spec_fd(int fd);

} // namespace rfaas::executor_process
