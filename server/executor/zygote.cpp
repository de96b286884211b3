#include "executor/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
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
#include "executor/executor_pool.hpp"
#include "executor/process.hpp"
#include "executor/sandbox.hpp"
#include "executor/test_hooks.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::executor_process {

using rfaas::server::write_all;

namespace {

/// Input slots per worker that the first pooled executor's worker link is
/// opened ahead for: librfaas's default (allocation_options::slots). Later
/// ones take the last request's.
constexpr uint32_t kFirstSpareInputSlots = 1;

using Clock = std::chrono::steady_clock;

/// A pooled executor's accounting link ahead of its allocation: where the
/// manager listens, and the secret that pooled executor presents.
struct PooledLinkTarget {
  std::string host;
  uint16_t port = 0;
  uint32_t connect_ms = 0;
  proto::Token secret;
};

/// The pooled executor's side: open the fabric and the endpoints of its links
/// ahead of need, compile the seccomp filter when its allocations will want
/// one (`seccomp`), connect its accounting link to the manager when `link`
/// says where (with the secret in it, which is wiped here once presented),
/// say on `fd` whether opening ahead pays ('1') or not ('0'), then wait for
/// a LaunchSpec (read until EOF) and serve it. EOF without a spec: the zygote
/// dropped the spare.
int run_spare(int fd, const rdmalib::DeviceConfig &device, uint32_t input_slots, bool seccomp,
              PooledLinkTarget *link = nullptr, bool in_container = false,
              bool test_stall_after_link = false, bool test_stall_after_spec = false) {
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
  // Sealing the sandbox is then one system call on the critical path
  // instead of ~0.3 ms of libseccomp compiling the same rules. Without the
  // fabric its options are unknown: the executor compiles it then.
  SeccompProgram filter;
  if (seccomp && fabric) {
    SeccompOptions o;
    o.allow_inet_stream = fabric->capabilities().sockets_after_setup;
    std::string why;
    if (!compile_seccomp(o, filter, why))
      spdlog::debug("spare executor: the seccomp filter is compiled at its allocation: {}", why);
  }
  // Connected while nobody waits for it: the manager binds it to the
  // allocation this executor takes, and the executor never connects on the
  // cold start's critical path (where the seccomp filter goes in, that link
  // had to be up before the sandbox was sealed). Failing here costs nothing:
  // the executor then connects as any other does.
  std::unique_ptr<AccountingLink> pooled_link;
  if (link && fabric) {
    try {
      pooled_link = std::make_unique<AccountingLink>(*fabric);
      pooled_link->connect_pooled(link->host, link->port, link->connect_ms, link->secret);
      spdlog::debug("spare executor: accounting link connected ahead of its allocation");
    } catch (const std::exception &e) {
      spdlog::debug("spare executor: no accounting link ahead ({}); it connects at its allocation",
                    e.what());
      pooled_link.reset();
    }
  }
  // Spent or refused: nothing the tenant's function could read later.
  if (link)
    explicit_bzero(link->secret.bytes, sizeof link->secret.bytes);
  // Test-only (test_hooks.hpp). Hangs rather than stops: in a PID
  // namespace this process is its init, which a SIGSTOP of its own does not
  // stop.
  while (test_stall_after_link)
    ::pause();
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
                    rdmalib::DeviceDatabase({device}).to_json()) {
    pooled_link.reset();
    fabric.reset();
  }
  // Ended while it waited: the manager binds no dead link (it sees the end
  // too), so this executor connects its own, as one forked for the
  // allocation does.
  if (pooled_link && pooled_link->ended_while_pooled()) {
    spdlog::warn("executor {:x}: the accounting link connected while pooled ended; connecting "
                 "another",
                 spec.allocation_id);
    pooled_link.reset();
  }
  // Test-only (test_hooks.hpp): the allocation's own executor, stuck after
  // its LaunchSpec while the client waits for its workers.
  if (test_stall_after_spec)
    spdlog::info("executor {:x}: test hook: holding before the workers connect",
                 spec.allocation_id);
  while (test_stall_after_spec)
    ::pause();
  return run_executor(spec, fabric.get(), &filter, pooled_link.get());
}

/// Kinds whose executors start in containers rather than by fork.
bool in_containers(server::SandboxKind kind) {
  return kind == server::SandboxKind::Oci || kind == server::SandboxKind::Command;
}

class Zygote {
public:
  Zygote(const rdmalib::DeviceConfig &device, bool exec_each, std::string self,
         const server::SandboxConfig &sandbox, size_t pool, const ManagerAddress &manager,
         uint32_t member_start_ms)
      : device_(device), exec_each_(exec_each), self_(std::move(self)), manager_(manager),
        sandbox_(sandbox, rdmalib::Fabric::confinement_needs(device)),
        pool_(exec_each || in_containers(sandbox.kind) ? 0 : pool,
              std::chrono::milliseconds(member_start_ms)) {
    if (in_containers(sandbox.kind))
      // Executors start in containers (container_pool.hpp), not by fork;
      // the container pool keeps its own containers started ahead.
      containers_ = std::make_unique<ContainerPool>(sandbox, device, sandbox_, self_,
                                                    [this] { enter_child(); });
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
    std::string refused;
    if (containers_ && !containers_->usable(refused)) {
      spdlog::error("zygote: {}", refused);
      emit("refused " + refused);
      return 1;
    }
    emit("ready " +
         (containers_ ? containers_->describe()
                      : sandbox_.describe() +
                            (pool_.capacity()
                                 ? "; pool of " + std::to_string(pool_.capacity()) + " executor(s)"
                                 : "; no executor pool")));
    if (ZygoteTestHooks::on(hooks_.zygote_exit_file)) {
      // Test-only (test_hooks.hpp): a zygote that fails right after its start.
      spdlog::info("zygote: test hook: exiting right after it became ready ({})",
                   hooks_.zygote_exit_file);
      return 1;
    }
    if (containers_)
      containers_->start();
    std::string in;
    bool open = true;
    std::vector<pollfd> p;
    while (open || !children_.empty() || !pool_.empty() || (containers_ && !containers_->idle())) {
      if (pool_.wants_member(Clock::now()))
        fork_member();
      // The signals and the manager's pipe, the pooled executors still to
      // report in, then the lifelines of executors in containers.
      p.assign({{sfd, POLLIN, 0}, {open ? 0 : -1, POLLIN, 0}});
      pool_.poll_fds(p);
      const size_t members_end = p.size();
      if (containers_)
        containers_->poll_fds(p);
      int timeout = pool_.timeout_ms(Clock::now(), 1000);
      if (containers_ && containers_->timeout_ms() >= 0)
        timeout = std::min(timeout, containers_->timeout_ms());
      int rc = ::poll(p.data(), p.size(), timeout);
      if (rc < 0 && errno != EINTR)
        break;
      if (p[0].revents & POLLIN) {
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) > 0) {
        }
      }
      for (size_t i = 2; i < members_end; ++i)
        if (p[i].revents & (POLLIN | POLLHUP | POLLERR))
          hear_member(p[i].fd);
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
      for (pid_t late : pool_.discard_late(Clock::now()))
        lost_member(late, "did not report ready within " +
                              std::to_string(pool_.start_deadline().count()) +
                              " ms (stopped, or stuck opening its fabric or connecting its "
                              "accounting link)");
      pool_.kill_overdue(Clock::now());
      if (containers_ && open)
        containers_->tick();
      if (open && (p[1].revents & (POLLIN | POLLHUP))) {
        char buf[65536];
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n <= 0 && !(n < 0 && errno == EINTR)) {
          // The manager is gone or ends: take the executors down with us.
          open = false;
          pool_.stop(Clock::now());
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
  /// signalfd, the pooled executors' sockets).
  void enter_child() {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    signal(SIGCHLD, SIG_DFL);
    if (sfd_ >= 0)
      ::close(sfd_);
    pool_.close_in_child();
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      ::close(devnull);
    }
    ::dup2(2, 1); // stdout is the manager's event pipe
  }

  /// In a forked child, before anything of an allocation: enter the
  /// sandbox, or end (an executor never runs less confined than configured).
  void confine(const ExecutorCgroup &cgroup, const ExecutorIdentity &who) {
    std::string why;
    if (!sandbox_.enter(cgroup, who, why)) {
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

  /// Fork the next pooled executor: it enters the sandbox, opens its fabric
  /// and, where that pays (shm), the endpoints of its links now, so that the
  /// next allocation skips all of it.
  void fork_member() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      spdlog::warn("zygote: socketpair for a pooled executor: {}; no executor pool",
                   std::strerror(errno));
      pool_.stop(Clock::now());
      return;
    }
    const pid_t zygote = ::getpid();
    // A pooled executor waits as whom an anonymous lease runs; a lease of
    // an owner who runs as someone else gets a fresh fork (hand_to_pool).
    std::string why;
    if (!sandbox_.identity_for(protocol::kAnonymousUid, spare_identity_, why)) {
      spdlog::warn("zygote: no identity for a pooled executor: {}; no executor pool", why);
      ::close(sv[0]);
      ::close(sv[1]);
      pool_.stop(Clock::now());
      return;
    }
    ExecutorCgroup cgroup = sandbox_.make_cgroup(next_cgroup_name());
    // The secret its accounting link presents while pooled: made here, told
    // to the manager, and wiped from the zygote's memory at once, so that no
    // executor forked later (whose tenant may read its memory) inherits it.
    PooledLinkTarget link;
    const bool link_ahead =
        manager_.port != 0 && ::getrandom(link.secret.bytes, sizeof link.secret.bytes, 0) ==
                                  static_cast<ssize_t>(sizeof link.secret.bytes);
    if (link_ahead) {
      link.host = manager_.host;
      link.port = manager_.port;
      link.connect_ms = manager_.connect_ms;
    }
    // Test-only (test_hooks.hpp): decided here, where the hooks' files are
    // visible, not in the child, which may already see only its sandbox.
    const bool hook_fail = ZygoteTestHooks::on(hooks_.fail_file);
    std::string stall_where;
    const bool hook_stall = !hook_fail && ZygoteTestHooks::take(hooks_.stall_file, &stall_where);
    const bool stall_after_link = hook_stall && stall_where == "after-link";
    const bool stall_after_spec = hook_stall && stall_where == "after-spec";
    pid_t pid = ::fork();
    if (pid < 0) {
      explicit_bzero(link.secret.bytes, sizeof link.secret.bytes);
      spdlog::warn("zygote: fork of a pooled executor: {}; no executor pool", std::strerror(errno));
      ::close(sv[0]);
      ::close(sv[1]);
      pool_.stop(Clock::now());
      return;
    }
    if (pid == 0) {
      enter_child();
      ::close(sv[0]);
      // Named before it enters the sandbox (milliseconds), so that it is
      // never taken for an allocation's executor meanwhile (ps, tests).
      prctl(PR_SET_NAME, "executor-spare");
      if (::getppid() != zygote)
        _exit(0); // the zygote died before the death signal was armed
      if (hook_fail) {
        spdlog::info("zygote: test hook: pooled executor {} fails at once ({})", ::getpid(),
                     hooks_.fail_file);
        _exit(ExitSetupFailed);
      }
      if (hook_stall && !stall_after_link && !stall_after_spec)
        ::raise(SIGSTOP);
      confine(cgroup, spare_identity_);
      spdlog::set_pattern("[%H:%M:%S.%e] [executor %P] [%l] %v");
      // The manager asks for the filter on every kind but process
      // (LaunchSpec::seccomp).
      const auto &sc = sandbox_.config();
      _exit(run_spare(sv[1], device_, spare_input_slots_,
                      sc.kind != server::SandboxKind::Process && sc.seccomp,
                      link_ahead ? &link : nullptr, false, stall_after_link, stall_after_spec));
    }
    ::close(sv[1]);
    if (hook_stall)
      spdlog::info("zygote: test hook: pooled executor {} stops {}", pid,
                   stall_after_spec ? "(hangs) after it got its LaunchSpec, before its workers "
                                      "connect"
                   : stall_after_link
                       ? "(hangs) after its accounting link connected, before it reports in"
                       : "before it opens its fabric");
    if (link_ahead)
      emit_pooled(pid, link.secret);
    explicit_bzero(link.secret.bytes, sizeof link.secret.bytes);
    cgroups_[pid] = std::move(cgroup);
    pool_.add(pid, sv[0]);
  }

  /// A pooled executor reported in (its fabric is open), or failed to.
  void hear_member(int fd) {
    pid_t failed = -1;
    if (!pool_.hear(fd, failed)) {
      lost_member(failed, "failed before it could wait (it closed its socket)");
      return;
    }
    if (!pool_said_ && pool_.ready() == pool_.capacity()) {
      pool_said_ = true;
      spdlog::info(
          "zygote: {} pooled executor(s) wait{} for allocations{}", pool_.capacity(),
          sandbox_.config().kind == server::SandboxKind::Process ? "" : " in their sandbox",
          pool_.failures() >= 2 ? " (after " + std::to_string(pool_.failures()) + " lost in a row)"
                                : std::string());
    }
  }

  /// Bind a pooled executor to the allocation of `spec` before it sees the
  /// allocation: the lease's cores (cpuset) and memory go into its cgroup
  /// (where there is none, the executor applies the memory rlimit and pins
  /// its workers itself, from the spec). The executor entered the sandbox
  /// as executor.user when it was forked (hand_to_pool takes it only for
  /// allocations that run as that user).
  /// False with `why` when it cannot be bound.
  bool bind(const PooledExecutor &e, const server::LaunchSpec &spec, std::string &why) {
    return limit(cgroups_[e.pid], spec, why);
  }

  /// Give the allocation of `spec` (LaunchSpec `text`) to a pooled
  /// executor. False if none is ready or the one taken could not be bound
  /// (then it is let go, and with it the pool: something is wrong with
  /// pooling here), and the allocation gets a fresh fork.
  bool hand_to_pool(const std::string &text, const server::LaunchSpec &spec,
                    const ExecutorIdentity &who) {
    // Pooled executors entered the sandbox as executor.user: a lease that
    // runs under its owner's uid gets a fresh fork.
    if (!(who == spare_identity_))
      return false;
    const auto now = Clock::now();
    for (;;) {
      PooledExecutor e = pool_.take(now);
      if (e.pid <= 0)
        return false;
      std::string why;
      if (!bind(e, spec, why)) {
        spdlog::warn("zygote: cannot bind the pooled executor {} to allocation {:x}: {}; no "
                     "executor pool",
                     e.pid, spec.allocation_id, why);
        pool_.release(e, now);
        pool_.stop(now);
        return false;
      }
      // A member that died since it reported in (its death not reaped yet)
      // has hung up its socket: it is discarded, and the allocation goes to
      // the next member or a fresh fork instead of to a dead executor the
      // client would wait for. Looked at, not written to: a write would
      // wake the executor, which would take a core before the "started"
      // line below leaves, and the client waits for that line.
      const pid_t pid = e.pid;
      if (hung_up(e.fd)) {
        pool_.release(e, now); // reaped as let go: "unpooled" follows
        lost_member(pid, "died while it waited; allocation " + hex(spec.allocation_id) +
                             " goes to another pooled executor or a fresh fork");
        continue;
      }
      if (ZygoteTestHooks::take(hooks_.handover_hold_file)) {
        // Test-only (test_hooks.hpp): the window between the look above and
        // the hand-over below, held open until a test killed the executor.
        spdlog::info("zygote: test hook: holding the hand-over of allocation {:x} to the pooled "
                     "executor {} until it hangs up (at most 10 s)",
                     spec.allocation_id, pid);
        pollfd p{e.fd, POLLIN | POLLRDHUP, 0};
        ::poll(&p, 1, 10000);
      }
      children_[pid] = spec.allocation_id;
      // "pooled": the manager logs and counts it, and binds its link.
      emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid) + " pooled");
      if (!write_all(e.fd, text)) {
        // It died in the moment since the look above, before it had the
        // spec: the allocation goes to the next pooled executor or a fresh
        // fork, whose "started" line replaces this one at the manager
        // (which answered the client already: the client then waits for
        // the new executor's workers, not for ever for this one's). Its
        // death is reaped as let go ("unpooled"), not as the allocation's
        // end.
        const std::string err = std::strerror(errno);
        children_.erase(pid);
        ::kill(pid, SIGKILL);
        pool_.release(e, now);
        lost_member(pid, "died as it took allocation " + hex(spec.allocation_id) + " (" + err +
                             "); the allocation goes to another pooled executor or a fresh fork");
        continue;
      }
      ::close(e.fd); // EOF: the spec is complete
      if (const unsigned n = pool_.succeeded(); n >= 2)
        spdlog::info("zygote: a pooled executor took an allocation after {} were lost in a row", n);
      return true;
    }
  }

  static std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "%" PRIx64, v);
    return b;
  }

  /// True when the peer of `fd`, a pooled executor's socket, hung up (it
  /// died): after its one-byte report it sends nothing, so anything to read
  /// is the end of file.
  static bool hung_up(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && p.revents != 0;
  }

  /// The pooled executor `pid` was lost before it took an allocation
  /// (`what` happened to it): its slot is refilled, at once for the first
  /// loss of a burst, then with back-off (ExecutorPool::failed), so that a
  /// pool whose every member fails never forks one after another. Logged
  /// at warn once per burst, the rest at debug.
  void lost_member(pid_t pid, const std::string &what) {
    pool_said_ = false; // say so again once the pool is full
    const unsigned n = pool_.failed(Clock::now());
    if (n == 1)
      spdlog::warn("zygote: the pooled executor {} {}; discarding it, its slot is refilled", pid,
                   what);
    else
      spdlog::debug("zygote: the pooled executor {} {}; discarding it, {} lost in a row: its slot "
                    "is refilled in {} ms",
                    pid, what, n, pool_.backoff().count());
  }

  /// "pooled <pid> <secret in hex>": built and written from the stack, and
  /// wiped, so that no copy of the secret stays in the zygote's heap.
  void emit_pooled(pid_t pid, const proto::Token &secret) {
    char line[64 + 2 * sizeof secret.bytes];
    int n = std::snprintf(line, sizeof line, "pooled %ld ", static_cast<long>(pid));
    for (size_t i = 0; i < sizeof secret.bytes && n > 0; ++i)
      n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "%02x", secret.bytes[i]);
    if (n > 0 && static_cast<size_t>(n) + 1 < sizeof line) {
      line[n++] = '\n';
      for (int done = 0; done < n;) {
        ssize_t w = ::write(1, line + done, static_cast<size_t>(n - done));
        if (w < 0 && errno == EINTR)
          continue;
        if (w <= 0) {
          spdlog::warn("zygote: cannot report the pooled executor {} to the manager", pid);
          break;
        }
        done += static_cast<int>(w);
      }
    }
    explicit_bzero(line, sizeof line);
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
      switch (pool_.reaped(pid)) {
      case ExecutorPool::Reaped::Member:
        // Died before it could wait (its fabric or sandbox failed): replaced
        // with back-off, as members that fail every time would be.
        lost_member(pid, "ended before it could wait (" + describe_status(status) + ")");
        emit("unpooled " + std::to_string(pid));
        continue;
      case ExecutorPool::Reaped::Lost:
        // Died while it waited (killed, or crashed): replaced.
        lost_member(pid, "died while it waited (" + describe_status(status) + ")");
        emit("unpooled " + std::to_string(pid));
        continue;
      case ExecutorPool::Reaped::Dropped:
        // Its link's secret, if it was never bound, is void from now on.
        emit("unpooled " + std::to_string(pid));
        continue;
      case ExecutorPool::Reaped::Other:
        break;
      }
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
      } else if (cmd == "unpool") {
        // "unpool <pid> <why>": the manager found this member's accounting
        // link dead, or never up: it must take no allocation. Let go, it
        // exits and is reaped ("unpooled").
        long pid = 0;
        std::string why;
        line >> pid;
        std::getline(line >> std::ws, why);
        in.erase(0, nl + 1);
        if (pid > 0 && pool_.discard(static_cast<pid_t>(pid), Clock::now()))
          lost_member(static_cast<pid_t>(pid),
                      "was given up by the manager: " + (why.empty() ? "its link" : why));
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
      // Who it runs as is the container pool's choice (the engine fixes the
      // uid when the container starts).
      std::string why;
      bool from_pool = false;
      pid_t pid = containers_->launch(text, spec, from_pool, why);
      if (pid < 0) {
        emit("failed " + std::to_string(spec.allocation_id) + " container: " + why);
        return;
      }
      children_[pid] = spec.allocation_id;
      emit("started " + std::to_string(spec.allocation_id) + " " + std::to_string(pid) +
           (from_pool ? " pooled" : ""));
      return;
    }
    ExecutorIdentity who;
    std::string refused;
    if (!sandbox_.identity_for(spec.owner_uid, who, refused)) {
      emit("failed " + std::to_string(spec.allocation_id) + " " + refused);
      return;
    }
    if (who.owner)
      spdlog::info("zygote: allocation {:x} runs as its lease's owner, uid {} gid {}",
                   spec.allocation_id, who.uid, who.gid);
    if (!exec_each_) {
      if (hand_to_pool(text, spec, who)) {
        note_request(spec);
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
      confine(cgroup, who);
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
    if (!exec_each_)
      note_request(spec);
  }

  /// The next pooled executor opens its worker links ahead for requests like
  /// this one.
  void note_request(const server::LaunchSpec &spec) {
    protocol::AllocationRequest req;
    std::vector<protocol::BufferDescriptor> results;
    if (protocol::decode(spec.request.data(), spec.request.size(), req, results))
      spare_input_slots_ = req.input_slots;
  }

  rdmalib::DeviceConfig device_;
  bool exec_each_;
  std::string self_;
  /// Where pooled executors connect their accounting links (no port: they
  /// connect theirs at their allocation).
  ManagerAddress manager_;
  sigset_t old_mask_;
  int sfd_ = -1;
  /// Allocations' executors (pooled ones once they took an allocation).
  std::map<pid_t, uint64_t> children_;
  Sandbox sandbox_;
  /// Each executor's cgroup (pooled ones included), removed when it is reaped.
  std::map<pid_t, ExecutorCgroup> cgroups_;
  uint64_t cgroup_seq_ = 0;
  ExecutorPool pool_;
  bool pool_said_ = false;
  ZygoteTestHooks hooks_ = ZygoteTestHooks::from_environment();
  /// Who pooled executors run as (that of an anonymous lease).
  ExecutorIdentity spare_identity_;
  uint32_t spare_input_slots_ = kFirstSpareInputSlots;
  /// The oci and command kinds: executors in containers.
  std::unique_ptr<ContainerPool> containers_;
};

} // namespace

int run_zygote(const rdmalib::DeviceConfig &warm_device, bool exec_each,
               const std::string &self_exe, const server::SandboxConfig &sandbox, size_t pool,
               const ManagerAddress &manager, uint32_t member_start_ms) {
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
  return Zygote(warm_device, exec_each, self_exe, sandbox, pool, manager, member_start_ms).run();
}

int run_waiting_executor(int fd, const rdmalib::DeviceConfig &device) {
  prctl(PR_SET_NAME, "executor-spare");
  // A container's executor is sealed unless the operator turned the filter
  // off (then the compiled filter goes unused).
  return run_spare(fd, device, kFirstSpareInputSlots, true, nullptr, true);
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
