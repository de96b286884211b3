#include "executor/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>

#include <rdmalib/rdmalib.hpp>
#include <spdlog/spdlog.h>

#include "common/fd_io.hpp"
#include "common/launch_spec.hpp"
#include "executor/container_pool.hpp"
#include "executor/executor.hpp"
#include "executor/sandbox.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::executor_process {

using rfaas::server::write_all;

namespace {

/// Input slots per worker that the first spare executor's worker link is
/// opened ahead for: librfaas's default (allocation_options::slots). Later
/// spares take the last request's.
constexpr uint32_t kFirstSpareInputSlots = 1;

using Clock = std::chrono::steady_clock;

/// How long after an allocation started the next spare is forked: opening
/// its fabric and endpoints takes a core for ~10 ms, which must not fall in
/// the setup of the allocation that just started (~20-40 ms on shm).
constexpr std::chrono::milliseconds kSpareDelay(100);

/// How long a dropped spare has to close its endpoints and exit before it is
/// killed. Closing takes milliseconds; a kill leaves its shm regions behind
/// (16 MiB files in /dev/shm that only a later reclaim frees).
constexpr std::chrono::milliseconds kSpareGrace(2000);

/// The spare executor's side: open the fabric and the endpoints of its links
/// ahead of need, say on `fd` whether that pays ('1') or not ('0'), then wait
/// for a LaunchSpec (read until EOF) and serve it. EOF without a spec: the
/// zygote dropped the spare.
int run_spare(int fd, const rdmalib::DeviceConfig &device, uint32_t input_slots,
              bool in_container = false) {
  // Before the fabric's thread that opens endpoints ahead exists.
  hold_termination_signals();
  std::unique_ptr<rdmalib::Fabric> fabric;
  bool ahead = false;
  try {
    fabric = std::make_unique<rdmalib::Fabric>(device);
    // The worker link first: it is on the client's critical path. Once
    // each: an executor makes these links once, and an endpoint opened after
    // that would only take a core from its workers.
    ahead = fabric->prepare(worker_link_options(input_slots), rdmalib::Fabric::Refill::Once);
    if (ahead)
      fabric->prepare(accounting_link_options(), rdmalib::Fabric::Refill::Once);
  } catch (const std::exception &e) {
    spdlog::warn("spare executor: cannot open the fabric ahead: {}", e.what());
    fabric.reset();
  }
  // The zygote may have handed over a spec and closed its end before this
  // answer (an allocation that came while the endpoints were being opened):
  // the spec is still there to read, so a failed answer is not the end.
  const char answer = ahead ? '1' : '0';
  ssize_t sent = ::send(fd, &answer, 1, MSG_NOSIGNAL);
  // Said once per container (its start is what the pool hides): when the
  // spec is there already, the container was started for it.
  if (in_container && sent == 1)
    spdlog::info("executor: container ready, waiting for an allocation");
  std::string text = server::read_to_end_and_close(fd);
  if (text.empty())
    return 0;
  prctl(PR_SET_NAME, "executor");
  server::LaunchSpec spec;
  try {
    spec = server::LaunchSpec::parse(text);
  } catch (const std::exception &e) {
    spdlog::error("executor: {}", e.what());
    return ExitSetupFailed;
  }
  // The manager's device with its overrides is the zygote's; should they
  // ever differ, the fabric opened ahead is the wrong one.
  if (fabric && rdmalib::DeviceDatabase({spec.device}).to_json() !=
                    rdmalib::DeviceDatabase({device}).to_json())
    fabric.reset();
  return run_executor(spec, fabric.get());
}

class Zygote {
public:
  Zygote(const rdmalib::DeviceConfig &device, bool exec_each, std::string self,
         const server::SandboxConfig &sandbox)
      : device_(device), exec_each_(exec_each), keep_spares_(!exec_each), self_(std::move(self)),
        sandbox_(sandbox, rdmalib::Fabric::confinement_needs(device)) {
    if (sandbox.kind == server::SandboxKind::Oci || sandbox.kind == server::SandboxKind::Command) {
      // Executors start in containers (container_pool.hpp), not by fork.
      keep_spares_ = false;
      containers_ = std::make_unique<ContainerPool>(sandbox, device, sandbox_, self_,
                                                    [this] { enter_child(); });
    }
  }

  int run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, &old_mask_);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
      spdlog::error("zygote: signalfd: {}", std::strerror(errno));
      return 1;
    }
    sfd_ = sfd;
    emit("ready " + (containers_ ? containers_->describe() : sandbox_.describe()));
    fork_spare();
    if (containers_)
      containers_->start();
    std::string in;
    bool open = true;
    while (open || !children_.empty() || spare_pid_ > 0 || !dropped_.empty() ||
           (containers_ && !containers_->idle())) {
      const bool spare_unheard = spare_pid_ > 0 && !spare_heard_;
      // The first three, then the lifelines of executors in containers.
      std::vector<pollfd> p = {{sfd, POLLIN, 0},
                               {open ? 0 : -1, POLLIN, 0},
                               {spare_unheard ? spare_fd_ : -1, POLLIN, 0}};
      if (containers_)
        containers_->poll_fds(p);
      int timeout = 1000;
      auto until = [&timeout](Clock::time_point t) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
        timeout =
            static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(timeout, left.count() + 1)));
      };
      if (spare_due_ != Clock::time_point{})
        until(spare_due_);
      if (containers_ && containers_->timeout_ms() >= 0)
        timeout = std::min(timeout, containers_->timeout_ms());
      for (const auto &d : dropped_)
        if (d.second != Clock::time_point::max())
          until(d.second);
      int rc = ::poll(p.data(), p.size(), timeout);
      if (rc < 0 && errno != EINTR)
        break;
      if (p[0].revents & POLLIN) {
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) > 0) {
        }
      }
      if (p[2].revents & (POLLIN | POLLHUP | POLLERR))
        hear_spare();
      if (containers_)
        for (const auto &e : containers_->collect_exits(p)) {
          // The executor's own exit, before its container is torn down.
          auto it = children_.find(e.first);
          if (it == children_.end())
            continue;
          emit("exited " + std::to_string(it->second) + " " + std::to_string(e.first) + " " +
               std::to_string(e.second));
          children_.erase(it);
        }
      reap();
      kill_overdue_spares();
      if (containers_ && open)
        containers_->tick();
      if (spare_due_ != Clock::time_point{} && Clock::now() >= spare_due_) {
        spare_due_ = {};
        fork_spare();
      }
      if (open && (p[1].revents & (POLLIN | POLLHUP))) {
        char buf[65536];
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
          // The manager is gone or ends: take the executors down with us.
          open = false;
          keep_spares_ = false;
          drop_spare();
          if (containers_)
            containers_->shutdown(); // their executors exit, then their engines
          else
            for (auto &c : children_)
              ::kill(c.first, SIGKILL);
        } else if (n > 0) {
          in.append(buf, static_cast<size_t>(n));
          handle(in);
        }
      }
    }
    return 0;
  }

private:
  static std::string describe_status(int status) {
    if (WIFSIGNALED(status))
      return std::string("signal ") + strsignal(WTERMSIG(status));
    return "exit code " + std::to_string(WEXITSTATUS(status));
  }

  /// What every forked child does first: die with the zygote, and keep none
  /// of its signal handling or descriptors (the manager's pipes, the
  /// signalfd, a spare's socket).
  void enter_child() {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    signal(SIGCHLD, SIG_DFL);
    if (sfd_ >= 0)
      ::close(sfd_);
    if (spare_fd_ >= 0)
      ::close(spare_fd_);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    }
    ::dup2(2, 1); // stdout is the manager's event pipe
  }

  /// In a forked child, before anything of an allocation: enter the
  /// sandbox, or end (an executor never runs less confined than configured).
  void confine(const ExecutorCgroup &cgroup) {
    std::string why;
    if (!sandbox_.enter(cgroup, why)) {
      spdlog::error("executor sandbox ({}): {}", server::to_string(sandbox_.config().kind), why);
      _exit(ExitSetupFailed);
    }
  }

  /// Write an allocation's limits into its executor's cgroup (none: rlimits
  /// apply, set by the sandbox and the executor).
  bool limit(ExecutorCgroup &cgroup, const server::LaunchSpec &spec, std::string &why) {
    if (cgroup.empty())
      return true;
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's shadow and quarantine would exceed any lease's memory.
    const uint64_t memory = 0;
#else
    const uint64_t memory = spec.memory_mib;
#endif
    return cgroup.limit(memory, spec.cores, sandbox_.config().max_processes, why);
  }

  std::string next_cgroup_name() {
    return "executor-" + std::to_string(::getpid()) + "-" + std::to_string(++cgroup_seq_);
  }

  /// Fork the next spare executor: it opens its fabric and the endpoints of
  /// its links now, so that the next allocation skips that. Only kept where
  /// it pays (the spare says whether rdmalib opened anything ahead).
  void fork_spare() {
    if (!keep_spares_ || spare_pid_ > 0)
      return;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      spdlog::warn("zygote: socketpair for a spare executor: {}", std::strerror(errno));
      keep_spares_ = false;
      return;
    }
    const pid_t zygote = ::getpid();
    ExecutorCgroup cgroup = sandbox_.make_cgroup(next_cgroup_name());
    pid_t pid = ::fork();
    if (pid < 0) {
      spdlog::warn("zygote: fork of a spare executor: {}", std::strerror(errno));
      ::close(sv[0]);
      ::close(sv[1]);
      keep_spares_ = false;
      return;
    }
    if (pid == 0) {
      enter_child();
      ::close(sv[0]);
      if (::getppid() != zygote)
        _exit(0); // the zygote died before the death signal was armed
      confine(cgroup);
      prctl(PR_SET_NAME, "executor-spare");
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      _exit(run_spare(sv[1], device_, spare_input_slots_));
    }
    ::close(sv[1]);
    cgroups_[pid] = std::move(cgroup);
    spare_pid_ = pid;
    spare_fd_ = sv[0];
    spare_heard_ = false;
  }

  /// Fork the next spare a little after an allocation started, so that its
  /// opening of endpoints does not compete for the cores with the executor
  /// that just took the last one (its setup is the client's critical path).
  void schedule_spare() {
    if (keep_spares_ && spare_pid_ <= 0 && spare_due_ == Clock::time_point{})
      spare_due_ = Clock::now() + kSpareDelay;
  }

  /// The spare said whether its endpoints were opened ahead.
  void hear_spare() {
    spare_heard_ = true;
    char c = 0;
    ssize_t n = ::read(spare_fd_, &c, 1);
    if (n == 1 && c == '1') {
      spdlog::debug("zygote: spare executor {} waits with its endpoints opened ahead", spare_pid_);
      return;
    }
    // Entering the sandbox costs milliseconds (moving into a v1 cgroup waits
    // for RCU grace periods, ~1.5 ms per controller here): a spare that has
    // done it pays even where endpoints open fast.
    if (n == 1 && sandbox_.config().kind != server::SandboxKind::Process) {
      if (!spare_sandboxed_said_) {
        spdlog::info("zygote: a spare executor waits in its sandbox ahead of the next allocation");
        spare_sandboxed_said_ = true;
      }
      return;
    }
    if (n == 1)
      spdlog::info("zygote: endpoints open fast on this provider; no spare executors kept");
    keep_spares_ = false;
    drop_spare();
  }

  /// Let the spare go: end of file on its socket, without a spec, makes it
  /// close its fabric and exit, which removes its shm regions. It is killed
  /// only if it has not exited within kSpareGrace, and reaped without a
  /// report.
  void drop_spare() {
    if (spare_pid_ <= 0)
      return;
    dropped_[spare_pid_] = Clock::now() + kSpareGrace;
    ::close(spare_fd_);
    spare_fd_ = -1;
    spare_pid_ = -1;
  }

  /// Dropped spares still there after their grace: killed once (they are
  /// our unreaped children, so the pid is still theirs).
  void kill_overdue_spares() {
    const auto now = Clock::now();
    for (auto &d : dropped_) {
      if (d.second > now)
        continue;
      spdlog::warn("zygote: the dropped spare executor {} did not exit within {} ms; killing it",
                   d.first, kSpareGrace.count());
      ::kill(d.first, SIGKILL);
      d.second = Clock::time_point::max();
    }
  }

  /// Give `text` to the spare; its pid on success, -1 if there is none or it
  /// could not take it (then it is dropped).
  pid_t hand_to_spare(const std::string &text, const server::LaunchSpec &spec) {
    if (spare_pid_ <= 0)
      return -1;
    // Its limits before its allocation: the client's code comes with it.
    std::string why;
    if (!limit(cgroups_[spare_pid_], spec, why)) {
      spdlog::warn("zygote: cannot limit the spare executor {}: {}", spare_pid_, why);
      keep_spares_ = false;
      drop_spare();
      return -1;
    }
    if (!write_all(spare_fd_, text)) {
      spdlog::warn("zygote: the spare executor {} cannot take an allocation: {}", spare_pid_,
                   std::strerror(errno));
      keep_spares_ = false;
      drop_spare();
      return -1;
    }
    pid_t pid = spare_pid_;
    ::close(spare_fd_); // EOF: the spec is complete
    spare_fd_ = -1;
    spare_pid_ = -1;
    return pid;
  }

  void emit(const std::string &line) {
    if (!write_all(1, line + "\n"))
      spdlog::warn("zygote: cannot report \"{}\" to the manager", line);
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0)
        return;
      // Kills whatever the executor left in its cgroup and removes it.
      cgroups_.erase(pid);
      if (containers_ && containers_->reaped(pid, status))
        continue; // a container started ahead, never used
      if (pid == spare_pid_) {
        // Died before it got an allocation: something is wrong with
        // opening ahead here, so allocations go back to fresh forks.
        spdlog::warn("zygote: the spare executor {} ended before use ({}); no more spares", pid,
                     describe_status(status));
        ::close(spare_fd_);
        spare_fd_ = -1;
        spare_pid_ = -1;
        keep_spares_ = false;
        continue;
      }
      if (dropped_.erase(pid))
        continue;
      auto it = children_.find(pid);
      uint64_t id = it == children_.end() ? 0 : it->second;
      if (it != children_.end())
        children_.erase(it);
      long code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      emit("exited " + std::to_string(id) + " " + std::to_string(pid) + " " + std::to_string(code));
    }
  }

  /// Consume complete commands from `in`.
  void handle(std::string &in) {
    for (;;) {
      size_t nl = in.find('\n');
      if (nl == std::string::npos)
        return;
      std::istringstream line(in.substr(0, nl));
      std::string cmd;
      line >> cmd;
      if (cmd == "spawn") {
        size_t bytes = 0;
        line >> bytes;
        if (in.size() < nl + 1 + bytes)
          return; // wait for the rest of the spec
        std::string text = in.substr(nl + 1, bytes);
        in.erase(0, nl + 1 + bytes);
        spawn(text);
      } else if (cmd == "signal") {
        uint64_t id = 0;
        int sig = 0;
        line >> id >> sig;
        in.erase(0, nl + 1);
        for (auto &c : children_)
          if (c.second == id) {
            if (containers_)
              containers_->signal(c.first, sig);
            else
              ::kill(c.first, sig);
          }
      } else {
        in.erase(0, nl + 1);
        spdlog::warn("zygote: unknown command \"{}\"", cmd);
      }
    }
  }

  void spawn(const std::string &text) {
    server::LaunchSpec spec;
    try {
      spec = server::LaunchSpec::parse(text);
    } catch (const std::exception &e) {
      emit(std::string("failed 0 ") + e.what());
      return;
    }
    if (containers_) {
      std::string why;
      pid_t pid = containers_->launch(text, spec, why);
      if (pid < 0) {
        emit("failed " + std::to_string(spec.allocation_id) + " container: " + why);
        return;
      }
      children_[pid] = spec.allocation_id;
      emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid));
      return;
    }
    if (!exec_each_) {
      pid_t pid = hand_to_spare(text, spec);
      if (pid > 0) {
        children_[pid] = spec.allocation_id;
        emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid));
        spdlog::debug("zygote: allocation {:x} went to spare executor {}", spec.allocation_id, pid);
        note_request(spec);
        schedule_spare();
        return;
      }
    }
    int memfd = -1;
    if (exec_each_) {
      memfd = memfd_create("rfaas-launch-spec", 0);
      if (memfd < 0 || !write_all(memfd, text) || ::lseek(memfd, 0, SEEK_SET) != 0) {
        emit("failed " + std::to_string(spec.allocation_id) + " memfd: " + std::strerror(errno));
        if (memfd >= 0)
          ::close(memfd);
        return;
      }
    }
    ExecutorCgroup cgroup = sandbox_.make_cgroup(next_cgroup_name());
    std::string why;
    if (!limit(cgroup, spec, why)) {
      emit("failed " + std::to_string(spec.allocation_id) + " cgroup: " + why);
      if (memfd >= 0)
        ::close(memfd);
      return;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      emit("failed " + std::to_string(spec.allocation_id) + " fork: " + std::strerror(errno));
      if (memfd >= 0)
        ::close(memfd);
      return;
    }
    if (pid == 0) {
      // Executor: dies with the zygote (and so with the manager).
      enter_child();
      confine(cgroup);
      if (exec_each_) {
        std::string fd = std::to_string(memfd);
        execl(self_.c_str(), "executor", "--spec-fd", fd.c_str(), static_cast<char *>(nullptr));
        spdlog::error("zygote: exec {}: {}", self_, std::strerror(errno));
        _exit(127);
      }
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      _exit(run_executor(spec));
    }
    if (memfd >= 0)
      ::close(memfd);
    cgroups_[pid] = std::move(cgroup);
    children_[pid] = spec.allocation_id;
    emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid));
    if (!exec_each_) {
      note_request(spec);
      schedule_spare();
    }
  }

  /// The next spare opens its worker links ahead for requests like this one.
  void note_request(const server::LaunchSpec &spec) {
    protocol::AllocationRequest req;
    std::vector<protocol::BufferDescriptor> results;
    if (protocol::decode(spec.request.data(), spec.request.size(), req, results))
      spare_input_slots_ = req.input_slots;
  }

  rdmalib::DeviceConfig device_;
  bool exec_each_;
  bool keep_spares_;
  std::string self_;
  sigset_t old_mask_;
  int sfd_ = -1;
  std::map<pid_t, uint64_t> children_;
  Sandbox sandbox_;
  /// Each executor's cgroup (spares included), removed when it is reaped.
  std::map<pid_t, ExecutorCgroup> cgroups_;
  uint64_t cgroup_seq_ = 0;
  pid_t spare_pid_ = -1;
  int spare_fd_ = -1;
  bool spare_heard_ = false;
  bool spare_sandboxed_said_ = false;
  uint32_t spare_input_slots_ = kFirstSpareInputSlots;
  Clock::time_point spare_due_{};
  /// Spares let go unused, reaped without a report: each with the time it is
  /// killed at if it has not exited (time_point::max() once killed).
  std::map<pid_t, Clock::time_point> dropped_;
  /// The oci and command kinds: executors in containers.
  std::unique_ptr<ContainerPool> containers_;
};

} // namespace

int run_zygote(const rdmalib::DeviceConfig &warm_device, bool exec_each,
               const std::string &self_exe, const server::SandboxConfig &sandbox) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1)
    return 1; // the manager died before we armed the death signal
  signal(SIGPIPE, SIG_IGN);
  // Executors serve clients of other tenants than their manager's: before
  // any provider loads (they read their variables then).
  if (sandbox.kind != server::SandboxKind::Process)
    rdmalib::Fabric::isolate_tenants();
  if (!exec_each) {
    // Load and initialise the backend and its providers once, here, so forked
    // executors only open their own fabric and endpoints; nothing stays open
    // (a child must not share a parent's device, endpoints or queues).
    try {
      rdmalib::Fabric::preload(warm_device);
    } catch (const std::exception &e) {
      spdlog::warn("zygote: warming the fabric failed (executors will open it cold): {}", e.what());
    }
  }
  return Zygote(warm_device, exec_each, self_exe, sandbox).run();
}

int run_waiting_executor(int fd, const rdmalib::DeviceConfig &device) {
  prctl(PR_SET_NAME, "executor-spare");
  return run_spare(fd, device, kFirstSpareInputSlots, true);
}

int run_from_spec_fd(int fd) {
  std::string text = server::read_to_end_and_close(fd);
  try {
    return run_executor(server::LaunchSpec::parse(text));
  } catch (const std::exception &e) {
    spdlog::error("executor: {}", e.what());
    return ExitSetupFailed;
  }
}

} // namespace rfaas::executor_process
