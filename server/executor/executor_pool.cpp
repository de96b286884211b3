#include "executor/executor_pool.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <spdlog/spdlog.h>

namespace rfaas::executor_process {

ExecutorPool::~ExecutorPool() {
  for (auto &m : members_)
    if (m.fd >= 0)
      ::close(m.fd);
}

size_t ExecutorPool::ready() const {
  return static_cast<size_t>(
      std::count_if(members_.begin(), members_.end(), [](const auto &m) { return m.ready; }));
}

bool ExecutorPool::wants_member(Clock::time_point now) const {
  if (stopped_ || members_.size() >= capacity_ || now < refill_due_)
    return false;
  return std::all_of(members_.begin(), members_.end(), [](const auto &m) { return m.ready; });
}

int ExecutorPool::timeout_ms(Clock::time_point now, int timeout) const {
  auto until = [&](Clock::time_point t) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
    timeout = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(timeout, left)));
  };
  if (!stopped_ && members_.size() < capacity_ && refill_due_ > now)
    until(refill_due_);
  for (const auto &d : dropped_)
    if (d.second != Clock::time_point::max())
      until(d.second);
  if (start_deadline_.count() > 0)
    for (const auto &m : members_)
      if (!m.ready)
        until(m.forked + start_deadline_);
  return timeout;
}

void ExecutorPool::add(pid_t pid, int fd) {
  PooledExecutor e;
  e.pid = pid;
  e.fd = fd;
  e.forked = Clock::now();
  members_.push_back(e);
}

void ExecutorPool::poll_fds(std::vector<pollfd> &out) const {
  for (const auto &m : members_)
    if (!m.ready)
      out.push_back({m.fd, POLLIN, 0});
}

bool ExecutorPool::hear(int fd, pid_t &failed) {
  auto it = std::find_if(members_.begin(), members_.end(),
                         [fd](const auto &m) { return m.fd == fd && !m.ready; });
  if (it == members_.end())
    return true;
  char c = 0;
  ssize_t n = ::read(fd, &c, 1);
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return true;
  if (n != 1) {
    // Its end closed without a report: it failed before it could wait.
    PooledExecutor e = *it;
    members_.erase(it);
    failed = e.pid;
    release(e, Clock::now());
    return false;
  }
  it->ready = true;
  it->endpoints_ahead = c == '1';
  return true;
}

PooledExecutor ExecutorPool::take(Clock::time_point now) {
  auto it = std::find_if(members_.begin(), members_.end(), [](const auto &m) { return m.ready; });
  if (it == members_.end())
    return {};
  PooledExecutor e = *it;
  members_.erase(it);
  refill_due_ = now + kRefillDelay;
  return e;
}

void ExecutorPool::release(PooledExecutor &e, Clock::time_point now) {
  if (e.pid <= 0)
    return;
  if (e.fd >= 0)
    ::close(e.fd);
  e.fd = -1;
  dropped_[e.pid] = now + kGrace;
  e.pid = -1;
}

bool ExecutorPool::discard(pid_t pid, Clock::time_point now) {
  auto it =
      std::find_if(members_.begin(), members_.end(), [pid](const auto &m) { return m.pid == pid; });
  if (it == members_.end())
    return false;
  PooledExecutor e = *it;
  members_.erase(it);
  if (!e.ready) {
    dropped_starting_.insert(e.pid);
    // Still starting: blocked in its accounting link's connect (SIGTERM
    // cancels it, ConnectionOptions::cancel), or stopped, where SIGTERM
    // waits for a SIGCONT; either way it then exits without its spec. With
    // the namespaces sandbox `pid` is the executor's box and the executor
    // its child, which neither signal reaches: one that is stuck is killed
    // with the box after kGrace (kill_overdue).
    ::kill(e.pid, SIGTERM);
    ::kill(e.pid, SIGCONT);
  }
  release(e, now);
  return true;
}

std::vector<pid_t> ExecutorPool::discard_late(Clock::time_point now) {
  std::vector<pid_t> late;
  if (start_deadline_.count() == 0)
    return late;
  for (const auto &m : members_)
    if (!m.ready && now - m.forked > start_deadline_)
      late.push_back(m.pid);
  for (pid_t pid : late)
    discard(pid, now);
  return late;
}

unsigned ExecutorPool::failed(Clock::time_point now) {
  if (failures_ == 0 || now - last_failure_ >= kBurstGap) {
    failures_ = 0;
    backoff_ = std::chrono::milliseconds(0);
  }
  ++failures_;
  last_failure_ = now;
  // The first loss of a burst is refilled at once (one killed now and then
  // is replaced without delay); then kBackoffStep, doubling, up to
  // kBackoffMax.
  if (failures_ >= 2)
    backoff_ = std::min<std::chrono::milliseconds>(
        kBackoffMax, backoff_.count() == 0 ? kBackoffStep : backoff_ * 2);
  refill_due_ = std::max(refill_due_, now + backoff_);
  return failures_;
}

unsigned ExecutorPool::succeeded() {
  unsigned n = failures_;
  failures_ = 0;
  backoff_ = std::chrono::milliseconds(0);
  return n;
}

void ExecutorPool::stop(Clock::time_point now) {
  stopped_ = true;
  while (!members_.empty()) {
    PooledExecutor e = members_.front();
    members_.pop_front();
    // One still starting may be connecting its accounting link to a manager
    // that no longer accepts (it is stopping): SIGTERM cancels that connect
    // (ConnectionOptions::cancel), so that it exits within kGrace instead of
    // being killed with its shared-memory regions left behind.
    if (!e.ready)
      ::kill(e.pid, SIGTERM);
    release(e, now);
  }
}

void ExecutorPool::kill_overdue(Clock::time_point now) {
  for (auto &d : dropped_) {
    if (d.second > now)
      continue;
    if (dropped_starting_.count(d.first))
      spdlog::debug("zygote: the pooled executor {} that was let go while it started did not exit "
                    "within {} ms; killing it",
                    d.first, kGrace.count());
    else
      spdlog::warn("zygote: the pooled executor {} that was let go did not exit within {} ms; "
                   "killing it",
                   d.first, kGrace.count());
    ::kill(d.first, SIGKILL);
    d.second = Clock::time_point::max();
  }
}

void ExecutorPool::close_in_child() const {
  for (const auto &m : members_)
    if (m.fd >= 0)
      ::close(m.fd);
}

ExecutorPool::Reaped ExecutorPool::reaped(pid_t pid) {
  dropped_starting_.erase(pid);
  if (dropped_.erase(pid))
    return Reaped::Dropped;
  auto it =
      std::find_if(members_.begin(), members_.end(), [pid](const auto &m) { return m.pid == pid; });
  if (it == members_.end())
    return Reaped::Other;
  if (it->fd >= 0)
    ::close(it->fd);
  const bool was_ready = it->ready;
  members_.erase(it);
  return was_ready ? Reaped::Lost : Reaped::Member;
}

} // namespace rfaas::executor_process
