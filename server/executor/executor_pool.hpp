// The zygote's pool of pre-started executors (executor.pool in the manager's
// configuration; docs/runtime.md, "The executor pool").
//
// A pooled executor is a child the zygote forked ahead of any allocation: it
// entered the sandbox (cgroup, namespaces, uid, minimal root), opened its
// fabric and, where opening endpoints is slow (shm), the endpoints of its
// links, and now blocks on a socket until the zygote hands it a LaunchSpec.
// An allocation then costs a write to that socket instead of a fork, a
// cgroup migration and a fabric opening. The zygote binds the executor to
// the allocation first (its cgroup's limits), and forks a replacement a
// little later, off the allocation's critical path.
//
// This class only keeps the books: which children are pooled, which have
// reported in, which were let go, and when the next one is due. Forking,
// confining and binding stay with the zygote (zygote.cpp), which owns the
// sandbox and the cgroups. Not thread-safe: the zygote's loop is its only
// user.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <set>
#include <vector>

#include <poll.h>

namespace rfaas::executor_process {

/// One pre-started executor, from the zygote's side.
struct PooledExecutor {
  pid_t pid = -1;
  /// The zygote's end of the socket the executor waits on: the LaunchSpec
  /// is written there, and end of file without one lets it go.
  int fd = -1;
  /// It reported in: its fabric is open and it waits for a LaunchSpec.
  bool ready = false;
  /// It opened the endpoints of its links ahead (rdmalib::Fabric::prepare).
  bool endpoints_ahead = false;
  /// When it was forked: it must report in within the start deadline.
  std::chrono::steady_clock::time_point forked{};
};

class ExecutorPool {
public:
  using Clock = std::chrono::steady_clock;

  /// How long after an allocation took a pooled executor its replacement is
  /// forked: opening a fabric and its endpoints takes a core for ~10 ms,
  /// which must not fall in the set-up of the allocation that just started
  /// (the client waits for its workers to connect).
  static constexpr std::chrono::milliseconds kRefillDelay{100};
  /// How long a pooled executor that is let go has to close its endpoints
  /// and exit before it is killed. A kill leaves its shm regions behind.
  static constexpr std::chrono::milliseconds kGrace{2000};
  /// Back-off of the refill while members keep failing (failed()): the
  /// first failure of a burst is refilled at once, each next one after
  /// twice the previous delay, from kBackoffStep up to kBackoffMax. A node
  /// whose pooled executors fail at once every time (a broken fabric, a
  /// sandbox that kills them) then forks one every kBackoffMax instead of
  /// one after another.
  static constexpr std::chrono::milliseconds kBackoffStep{100};
  static constexpr std::chrono::milliseconds kBackoffMax{10000};
  /// A failure this long after the previous one starts a new burst.
  static constexpr std::chrono::milliseconds kBurstGap{60000};

  /// `capacity` executors are kept waiting; 0 disables the pool. A member
  /// that has not reported in within `start_deadline` of its fork (0: no
  /// bound) is let go by discard_late().
  explicit ExecutorPool(size_t capacity,
                        std::chrono::milliseconds start_deadline = std::chrono::milliseconds(0))
      : capacity_(capacity), start_deadline_(start_deadline) {}
  ~ExecutorPool();
  ExecutorPool(const ExecutorPool &) = delete;
  ExecutorPool &operator=(const ExecutorPool &) = delete;

  size_t capacity() const { return capacity_; }
  /// Pooled executors that are ready to take an allocation.
  size_t ready() const;
  /// Whether the zygote should fork another pooled executor at `now`: the
  /// pool is on and below capacity, the refill is due, and no member is
  /// still starting (they start one at a time, so that two never compete for
  /// a core with each other or with an allocation).
  bool wants_member(Clock::time_point now) const;
  /// The latest poll() timeout (ms) that still meets the next refill and
  /// the next grace deadline; `timeout` when neither is sooner.
  int timeout_ms(Clock::time_point now, int timeout) const;

  /// Record a freshly forked member; the pool owns `fd` from now on.
  void add(pid_t pid, int fd);
  /// The descriptors of members still starting, to poll for their report.
  void poll_fds(std::vector<pollfd> &out) const;
  /// A member's descriptor became readable: read its one-byte report
  /// ('1': endpoints opened ahead, '0': not). False when it said nothing
  /// (it failed), after which the member is let go and `failed` is its pid.
  bool hear(int fd, pid_t &failed);

  /// Take the longest-waiting ready member out of the pool (its pid is -1
  /// when none is ready). The caller binds it to an allocation and hands it
  /// the LaunchSpec, or lets it go with release(); either way it closes
  /// `fd`. Schedules the refill.
  PooledExecutor take(Clock::time_point now);

  /// Let one executor go that is no longer pooled (taken, then found
  /// unfit): close its socket and give it kGrace to exit.
  void release(PooledExecutor &e, Clock::time_point now);
  /// Let the member `pid` go (the manager found its accounting link dead,
  /// or it never came up): as release(); one still starting is also sent
  /// SIGTERM and SIGCONT (it may be stuck in its connect, or stopped), so
  /// that it exits within kGrace. The caller counts it with failed(). False
  /// when `pid` is not a member (taken or gone already).
  bool discard(pid_t pid, Clock::time_point now);

  /// Let go (as discard()) every member still starting past the start
  /// deadline, and return their pids for the caller to count with failed():
  /// without it, one stuck (stopped, or blocked in its fabric or its link)
  /// would hold its slot, and the refill of every other, for ever.
  std::vector<pid_t> discard_late(Clock::time_point now);
  std::chrono::milliseconds start_deadline() const { return start_deadline_; }

  /// A member was lost before any allocation took it (died, failed to
  /// start, discarded): its slot is refilled after the burst's back-off
  /// (kBackoffStep..kBackoffMax). Returns how many were lost in a row in
  /// this burst (1: the first, which the caller logs at warn; later ones
  /// it logs at debug).
  unsigned failed(Clock::time_point now);
  /// A member took an allocation: the burst of failures, if any, is over.
  /// Returns how many it had (0: none).
  unsigned succeeded();
  /// Failures in a row so far, and the delay the last one put on the refill.
  unsigned failures() const { return failures_; }
  std::chrono::milliseconds backoff() const { return backoff_; }
  /// Let every member go and fork no more (the zygote ends, or pooling
  /// failed here).
  void stop(Clock::time_point now);
  bool stopped() const { return stopped_; }

  /// Kill once the executors that were let go and are still there after
  /// their grace (they are the zygote's unreaped children: the pid is
  /// still theirs).
  void kill_overdue(Clock::time_point now);

  /// What a reaped child was to the pool.
  enum class Reaped {
    Other,   ///< not the pool's: an allocation's executor
    Dropped, ///< let go; nothing to report
    Member,  ///< died while still starting, before it reported in
    Lost,    ///< died while it waited, ready, before any allocation
  };
  Reaped reaped(pid_t pid);

  /// In a child just forked from the zygote: close the zygote's ends of the
  /// members' sockets, which the fork copied. A member that kept another's
  /// end open would never see the end of file that lets that one go.
  void close_in_child() const;

  /// Members (ready or starting) and executors let go but not yet reaped.
  bool empty() const { return members_.empty() && dropped_.empty(); }

private:
  size_t capacity_;
  std::chrono::milliseconds start_deadline_;
  bool stopped_ = false;
  /// Oldest first: the longest-waiting member is taken first.
  std::deque<PooledExecutor> members_;
  Clock::time_point refill_due_{};
  /// The current burst of failures (failed()), and when its last one was.
  unsigned failures_ = 0;
  std::chrono::milliseconds backoff_{0};
  Clock::time_point last_failure_{};
  /// Let go, unreaped: the time each is killed at (max() once killed).
  std::map<pid_t, Clock::time_point> dropped_;
  /// Let go while still starting (stuck, or stopped): their kill after
  /// kGrace is expected, and said at debug only.
  std::set<pid_t> dropped_starting_;
};

} // namespace rfaas::executor_process
