// Real processes for the end-to-end tests: start a binary with its stdout on a
// pipe, wait for a line (readiness) with a deadline, stop it, and look at the
// process tree through /proc. No sleeps for readiness: reads block on poll()
// with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace rfaas::e2e {

class Process {
public:
  Process() = default;
  /// fork + exec `argv` (argv[0] is the path). stdout on a pipe, stderr into
  /// `stderr_path` (or inherited when empty), stdin on a pipe kept open.
  /// Throws std::runtime_error when fork/exec setup fails.
  Process(const std::vector<std::string> &argv, const std::string &stderr_path);
  ~Process();
  Process(Process &&o) noexcept;
  Process &operator=(Process &&o) noexcept;
  Process(const Process &) = delete;
  Process &operator=(const Process &) = delete;

  /// The next stdout line containing `needle`, or "" when the deadline
  /// passed or the process closed its stdout first. Earlier lines are dropped.
  std::string wait_for_line(const std::string &needle, std::chrono::milliseconds timeout);

  /// SIGTERM, then SIGKILL after `grace`; reaps. Returns the wait status.
  int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  /// SIGKILL and reap.
  void kill_now();

  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0; }

private:
  pid_t pid_ = -1;
  int out_ = -1;
  int in_ = -1;
  std::string buffered_;
};

/// Direct children of `pid` (from /proc/*/stat).
std::vector<pid_t> children_of(pid_t pid);
/// Every descendant of `pid`.
std::vector<pid_t> descendants_of(pid_t pid);
/// True while /proc/<pid> exists and the process is not a zombie.
bool alive(pid_t pid);
/// The process's name (/proc/<pid>/comm); "" when it is gone.
std::string process_name(pid_t pid);
/// The name the zygote gives an executor forked ahead that waits for an
/// allocation; it takes the name "executor" when it gets one.
inline const char *kSpareExecutorName = "executor-spare";
/// The process between the zygote and a sandboxed executor (or spare): it
/// waits for it and ends with it (server/executor/sandbox.hpp).
inline const char *kSandboxWaiterName = "executor-box";
/// Descendants of `pid` that are not spare executors.
std::vector<pid_t> busy_descendants_of(pid_t pid);
/// Resident memory of this process that is its own, bytes (statm's resident
/// minus shared pages): a provider's shared-memory regions and mapped files
/// are left out.
size_t private_resident_bytes();
/// Bytes the C heap has handed out and not taken back (mallinfo2), so that a
/// test can tell allocation from the first touch of memory allocated before
/// (a provider's preposted receive buffers, used in turn, fault in pages long
/// after they were allocated: tcp;ofi_rxm grows its resident size by ~12 MiB
/// over the first 200,000 calls, then stays flat).
size_t heap_in_use_bytes();

} // namespace rfaas::e2e
