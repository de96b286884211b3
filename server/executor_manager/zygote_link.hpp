// The executor manager's end of its zygote (server/executor/zygote.hpp): the
// process that forks, confines and reaps every executor. The manager starts
// it once, hands it one LaunchSpec per allocation and hears back, on a pipe,
// when each executor started, could not start, or exited.
//
// The link never blocks the manager's loop for longer than the caller's
// timeout, and a zygote that dies is reported as one event (every executor
// died with it: PR_SET_PDEATHSIG), after which the caller restarts it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <rdmalib/device.hpp>

#include "common/sandbox_config.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::manager {

/// One report of the zygote about one allocation's executor.
struct ZygoteEvent {
  enum class Kind {
    Started,  ///< `pid` runs the allocation's executor (a second report for
              ///< one allocation: its first executor died as it took it,
              ///< and `pid` replaces it)
    Failed,   ///< it could not be started: `reason`
    Exited,   ///< it ended with `code` (exit code, or -signal number)
    Died,     ///< the zygote itself died, and every executor with it
    Pooled,   ///< `pid` waits in the pool; its link presents `secret`
    Unpooled, ///< the pooled `pid` is gone before it took an allocation
  };
  Kind kind = Kind::Started;
  uint64_t allocation = 0;
  pid_t pid = -1;
  /// Started: a pooled executor, pre-started, took the allocation.
  bool pooled = false;
  long code = 0;
  std::string reason;
  /// Pooled: the secret that executor's accounting link presents.
  protocol::Token secret;
};

class ZygoteLink {
public:
  using Handler = std::function<void(const ZygoteEvent &)>;

  /// `executor` is the executor binary; `device` the fabric every executor
  /// opens (the zygote loads its providers once); `fork_from_zygote` false
  /// executes a fresh executor binary per allocation; `sandbox` says how the
  /// zygote confines them; `pool` executors are kept pre-started
  /// (executor.pool; none when executing each). Events go to `on_event`.
  ZygoteLink(std::string executor, rdmalib::DeviceConfig device, bool fork_from_zygote,
             server::SandboxConfig sandbox, uint32_t pool, Handler on_event);
  ~ZygoteLink();
  ZygoteLink(const ZygoteLink &) = delete;
  ZygoteLink &operator=(const ZygoteLink &) = delete;

  /// Have pooled executors connect their accounting links to the manager at
  /// `host`:`port` while they wait (deadline `connect_ms`), from the next
  /// start() on. Without it they connect theirs at their allocation.
  void pool_links_to(std::string host, uint16_t port, uint32_t connect_ms) {
    link_host_ = std::move(host);
    link_port_ = port;
    link_connect_ms_ = connect_ms;
  }

  /// Start the zygote and wait up to `ready_within` for it to have loaded the
  /// backend. Throws std::runtime_error naming the binary and the cause.
  void start(std::chrono::milliseconds ready_within);
  /// Close its command pipe (it then kills and reaps its executors) and wait
  /// up to `grace` before killing it.
  void stop(std::chrono::milliseconds grace);

  /// Read what the zygote said, waiting up to `timeout_ms` for the first
  /// byte; every complete line becomes one event. Returns true if anything
  /// was read.
  bool read(int timeout_ms);
  /// Hand over one executor's LaunchSpec text. False if the zygote is gone.
  bool spawn(const std::string &spec_text);
  /// Ask the zygote to signal the executor of `allocation` (only while it is
  /// unreaped, so a recycled pid is never hit).
  void signal(uint64_t allocation, int sig);
  /// Ask the zygote to let the pooled executor `pid` go (its accounting link
  /// is dead, or never came up: `why`, which the zygote logs): it takes no
  /// allocation, exits, and its slot is refilled. The zygote reads its
  /// commands in order, so a spawn sent after this never gets that executor.
  void unpool(pid_t pid, const std::string &why);

  /// The pipe the zygote's events arrive on (for poll()), or -1.
  int fd() const { return out_; }
  bool running() const { return in_ >= 0; }
  pid_t pid() const { return pid_; }

private:
  void event_line(const std::string &line);

  std::string executor_;
  rdmalib::DeviceConfig device_;
  bool fork_from_zygote_;
  server::SandboxConfig sandbox_;
  uint32_t pool_;
  std::string link_host_;
  uint16_t link_port_ = 0;
  uint32_t link_connect_ms_ = 0;
  Handler on_event_;
  pid_t pid_ = -1;
  int in_ = -1;  // commands to the zygote
  int out_ = -1; // events from the zygote
  std::string buf_;
  bool ready_ = false;
  /// What the zygote said of its sandbox when it became ready.
  std::string sandbox_line_;
  /// Why the zygote refused its sandbox configuration ("refused" line).
  std::string refused_;
};

} // namespace rfaas::manager
