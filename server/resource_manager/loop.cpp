#include "resource_manager/loop.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace {
std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}

using std::chrono::microseconds;
/// A waiting lease write runs between requests once it is this old: a
/// client that leases and releases back to back releases well within it,
/// and the release then folds into the grant's write (one row write).
constexpr microseconds kApplyAfter{100};
/// After a pass that served requests, at most this many, and only beyond
/// kApplyAtOnceAbove waiting.
constexpr size_t kApplyPerPass = 4;
/// Beyond this many waiting, they run whatever their age.
constexpr size_t kApplyAtOnceAbove = 64;
} // namespace

Loop::Loop(Registry &registry, std::chrono::milliseconds tick_every)
    : registry_(registry), tick_every_(tick_every) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0)
    throw std::runtime_error(std::string("resource manager loop: eventfd: ") +
                             std::strerror(errno));
}

Loop::~Loop() {
  stop();
  ::close(wake_fd_);
}

void Loop::wake() noexcept {
  const uint64_t one = 1;
  // EAGAIN means the counter is saturated: the loop is woken anyway.
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

void Loop::start() {
  if (running_.exchange(true))
    return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void Loop::stop() {
  if (!running_.load())
    return;
  {
    std::lock_guard<std::mutex> g(producers_);
    stopping_ = true;
    queue_.enqueue(nullptr);
  }
  wake();
  if (thread_.joinable())
    thread_.join();
  running_ = false;
}

void Loop::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> g(producers_);
  // Checked under the producers' lock: stop() sets it under the same lock
  // before its wake-up, so no task can land behind the last one the loop runs.
  if (stopping_ || !running_)
    throw LoopStopped();
  queue_.enqueue(std::move(task));
  wake();
}

void Loop::deliver_events() {
  std::vector<LeaseEnded> events = registry_.take_events();
  if (events.empty())
    return;
  if (driver_) {
    try {
      driver_->deliver(events, registry_);
    } catch (const std::exception &e) {
      log()->error("delivering lease-ended notices failed: {}", e.what());
    }
    return;
  }
  for (const LeaseEnded &e : events)
    log()->debug("lease {} ended on node {} ({}); no fabric side to tell it", e.lease_id, e.node,
                 to_string(e.why));
}

void Loop::publish() noexcept {
  try {
    published_nodes_.publish(registry_);
    published_leases_.publish(registry_);
  } catch (const std::exception &e) {
    log()->warn("publishing the nodes and leases failed: {}", e.what());
  }
  try {
    std::atomic_store(&published_, std::shared_ptr<const RegistrySnapshot>(
                                       std::make_shared<RegistrySnapshot>(snapshot(registry_))));
    published_at_ = std::chrono::steady_clock::now();
    unpublished_ = false;
  } catch (const std::exception &e) {
    // Readers keep the previous snapshot; the next publication may succeed.
    log()->warn("publishing the metrics snapshot failed: {}", e.what());
  }
}

bool Loop::run_task(std::function<void()> &task) {
  if (!task)
    return !stopping_; // the stop marker (or a spurious wake-up)
  task();              // a packaged_task: exceptions travel to the caller's future
  task = nullptr;
  ++tasks_run_;
  deliver_events();
  return true;
}

void Loop::sleep_until_work(std::chrono::steady_clock::time_point until) {
  wait_fds_.clear();
  int limit_ms = driver_ ? driver_->prepare_wait(wait_fds_) : -1;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
  int timeout = static_cast<int>(std::max<int64_t>(0, left.count()));
  if (limit_ms >= 0)
    timeout = std::min(timeout, limit_ms);
  if (timeout == 0) {
    // Polling without sleeping: let the clients (and a provider's progress
    // thread) have the core between passes. The look below still tells the
    // driver which links have something.
    sched_yield();
  }
  std::vector<pollfd> pfds;
  pfds.reserve(wait_fds_.size() + 1);
  pfds.push_back({wake_fd_, POLLIN, 0});
  std::sort(wait_fds_.begin(), wait_fds_.end());
  wait_fds_.erase(std::unique(wait_fds_.begin(), wait_fds_.end()), wait_fds_.end());
  for (int fd : wait_fds_)
    if (fd >= 0)
      pfds.push_back({fd, POLLIN, 0});
  if (::poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR)
    log()->error("resource manager loop: poll: {}", std::strerror(errno));
  if (pfds[0].revents) {
    // Reset before the queue is read: a task enqueued after this read
    // writes again, so none can wait unseen.
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
  }
  if (!driver_)
    return;
  ready_fds_.clear();
  for (size_t i = 1; i < pfds.size(); ++i)
    if (pfds[i].revents)
      ready_fds_.push_back(pfds[i].fd);
  driver_->ready(ready_fds_);
}

void Loop::run() {
  auto next_tick = std::chrono::steady_clock::now();
  std::function<void()> task;
  if (driver_)
    driver_->started([this] { wake(); });
  publish();
  // When a fabric pass last did work: the busy-poll window runs from it.
  auto fabric_worked_at = std::chrono::steady_clock::time_point{};
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      try {
        registry_.tick();
      } catch (const std::exception &e) {
        log()->error("periodic check failed: {}", e.what());
      }
      if (provider_) {
        try {
          provider_->tick(registry_);
        } catch (const std::exception &e) {
          log()->error("node provider: {}", e.what());
        }
      }
      deliver_events();
      next_tick = now + tick_every_;
      publish();
    }
    bool worked = false;
    if (driver_) {
      try {
        worked = driver_->poll(registry_);
      } catch (const std::exception &e) {
        log()->error("fabric pass failed: {}", e.what());
      }
      deliver_events();
      // Lease writes whose answers left wait for their SQL
      // (Store::apply_pending), run between requests (below). A pass that
      // served requests runs some only when many wait (a loop never idle):
      // the same clients' next requests are due at once, and one that
      // comes while a write runs waits for it.
      if (worked && registry_.store().pending_writes() > kApplyAtOnceAbove)
        registry_.store().apply_pending(kApplyPerPass);
      // Back-to-back passes publish at most once a millisecond: a snapshot
      // counts every node.
      if (worked) {
        unpublished_ = true;
        fabric_worked_at = std::chrono::steady_clock::now();
        if (fabric_worked_at - published_at_ >= std::chrono::milliseconds(1))
          publish();
      }
    }
    // Tasks queued meanwhile run now, a bounded batch per pass, so a flood
    // of REST calls cannot starve the fabric either.
    for (int i = 0; i < 64 && queue_.try_dequeue(task); ++i) {
      worked = true;
      if (!run_task(task)) {
        // Tasks enqueued before the stop marker have run; none can follow it.
        if (driver_)
          driver_->stop(registry_);
        registry_.store().commit_deferred();
        return;
      }
    }
    if (!worked && busy_poll_.count() > 0) {
      // Within the window: pass again at once. Tasks queued meanwhile and a
      // periodic check that falls due are taken by that pass, as after a
      // sleep, so the window starves neither.
      now = std::chrono::steady_clock::now();
      if (now - fabric_worked_at < busy_poll_ && now < next_tick) {
        // Between requests: one waiting lease write, so that a request
        // that comes meanwhile waits for one at most.
        Store &store = registry_.store();
        if (store.apply_pending(1, store.pending_writes() > kApplyAtOnceAbove ? microseconds(0)
                                                                              : kApplyAfter))
          continue;
        // The clients that will send the next request may be waiting for
        // this CPU: let them have it between passes.
        sched_yield();
        continue;
      }
    }
    if (!worked) {
      // Writes left waiting for their commit (Store::commit_batch) are not
      // committed before every sleep (with one client the loop sleeps
      // between leases: a commit per lease again), but the sleep ends when
      // they are due.
      Store &store = registry_.store();
      store.apply_pending();
      store.commit_if_due();
      if (unpublished_)
        publish();
      const auto due = store.commit_due();
      sleep_until_work(due ? std::min(next_tick, *due) : next_tick);
      store.commit_if_due();
    }
  }
}

} // namespace rfaas::rm
