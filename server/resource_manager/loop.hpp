// The loop thread that owns the Registry. Other threads (the HTTP server's)
// never touch the registry: they hand a task to the loop through a
// readerwriterqueue and wait for its answer. The fabric side (a LoopDriver)
// runs on the loop thread itself: the loop alternates a non-blocking pass
// over the fabric with draining its task queue, so neither needs a lock.
//
// When a pass finds nothing to do, the loop sleeps in poll(2) on the
// descriptors the driver names (the fabric's wait objects) and on an
// eventfd that every submitted task writes, so a request from either side
// wakes it at once; the only timeouts are the next periodic check (expiry,
// heartbeats), the deadline of writes waiting for their commit
// (Store::commit_due: at most Store::kDeferAtMostMs after the first), or
// what the driver asks for where the fabric offers no descriptor. Within
// the busy-poll window after a fabric pass that did work (set_busy_poll),
// it passes again instead of sleeping: a client that leases back to back
// sends its next request some 10-30 us after its answer, and a sleep costs
// the loop a wake-up of about that much. Those passes run the queued tasks
// and the periodic check as any pass does, so the window delays neither.
//
// readerwriterqueue is single-producer: producers take a small mutex around
// the enqueue alone (a few nanoseconds), never around the loop or its state;
// the loop dequeues without any lock.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <readerwriterqueue/readerwriterqueue.h>

#include "resource_manager/metrics.hpp"
#include "resource_manager/node_provider.hpp"
#include "resource_manager/published_leases.hpp"
#include "resource_manager/published_nodes.hpp"
#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// The loop has stopped: a task submitted now is never run.
class LoopStopped : public std::runtime_error {
public:
  LoopStopped() : std::runtime_error("the resource manager is shutting down") {}
};

/// The loop did not take a call's task within the call timeout; the task
/// was withdrawn and never runs.
class LoopBusy : public std::runtime_error {
public:
  explicit LoopBusy(std::chrono::milliseconds waited)
      : std::runtime_error("the resource manager's loop did not take this request within " +
                           std::to_string(waited.count()) +
                           " ms (http.loop_timeout_ms); try again") {}
};

/// Work the loop thread does between tasks (the fabric side). Every call
/// must return promptly: it runs between the HTTP threads' tasks.
class LoopDriver {
public:
  virtual ~LoopDriver() = default;
  /// One non-blocking pass; true if it found work (the loop then does not
  /// sleep before the next pass).
  virtual bool poll(Registry &registry) = 0;
  /// Lease-ended notices taken from the registry, to be delivered.
  virtual void deliver(const std::vector<LeaseEnded> &events, Registry &registry) = 0;
  /// Called after a pass that found no work, before the loop sleeps: adds
  /// to `fds` the descriptors whose readiness (POLLIN) means work for poll()
  /// and returns the longest the loop may sleep, in milliseconds: 0 when it
  /// must not sleep now (something is pending that no descriptor announces),
  /// -1 when the descriptors say everything.
  virtual int prepare_wait(std::vector<int> &fds) = 0;
  /// After the sleep (or the non-blocking look that replaces it when
  /// prepare_wait returned 0): which of those descriptors were readable.
  virtual void ready(const std::vector<int> &fds) { (void)fds; }
  /// Called on the loop thread before the first pass with a function that
  /// wakes the loop from any thread (a pass follows soon).
  virtual void started(std::function<void()> wake) { (void)wake; }
  /// The loop is ending: close every connection (bounded in time).
  virtual void stop(Registry &registry) = 0;
};

class Loop {
public:
  /// `tick_every`: how often Registry::tick runs (expiry, heartbeats).
  Loop(Registry &registry, std::chrono::milliseconds tick_every);
  ~Loop();
  Loop(const Loop &) = delete;
  Loop &operator=(const Loop &) = delete;

  /// Drive `driver` from the loop thread (call before start()). Not owned.
  void attach(LoopDriver *driver) { driver_ = driver; }
  /// Ticks `provider` after each Registry::tick (call before start()). Not owned.
  void attach_provider(NodeProvider *provider) { provider_ = provider; }
  /// After a fabric pass that did work, keep passing without sleeping until
  /// `window` has gone by without any (call before start()); 0, the
  /// default, sleeps as soon as a pass finds nothing. Costs up to `window`
  /// of a core after each burst of work.
  void set_busy_poll(std::chrono::microseconds window) { busy_poll_ = window; }
  void start();
  /// Runs the queued tasks still waiting, then ends the thread.
  void stop();

  /// Runs `f(registry)` on the loop thread and returns its result; rethrows
  /// what it threw. Throws LoopStopped if the loop is not running, and
  /// LoopBusy when a call timeout is set and the loop has not started the
  /// task within it: the task is then withdrawn (it never runs, so `f` may
  /// refer to the caller's locals). A task the loop has started is waited
  /// for: tasks are short, it is the loop that may be held up.
  template <class F> auto call(F f) -> std::invoke_result_t<F, Registry &> {
    using R = std::invoke_result_t<F, Registry &>;
    auto state = std::make_shared<std::atomic<int>>(kQueued);
    auto task = std::make_shared<std::packaged_task<R()>>([this, f = std::move(f)]() mutable {
      // Published before the answer is: whoever got it reads /metrics
      // with this task's changes in.
      struct PublishAfter {
        Loop &loop;
        ~PublishAfter() { loop.publish(); }
      } publish_after{*this};
      return f(registry_);
    });
    std::future<R> answer = task->get_future();
    submit([task, state] {
      int queued = kQueued;
      if (state->compare_exchange_strong(queued, kStarted))
        (*task)();
    });
    const std::chrono::milliseconds timeout = call_timeout_.load();
    if (timeout.count() > 0 && answer.wait_for(timeout) != std::future_status::ready) {
      int queued = kQueued;
      if (state->compare_exchange_strong(queued, kWithdrawn))
        throw LoopBusy(timeout);
    }
    return answer.get();
  }

  /// Longest call() waits for the loop to start its task (0: no limit, the
  /// default). Safe to change while calls run.
  void set_call_timeout(std::chrono::milliseconds timeout) { call_timeout_ = timeout; }

  /// The registry's counters and totals (what /metrics shows) as the loop
  /// last published them, without a task: after every task (before its
  /// answer), after each periodic check, after a fabric pass that did work
  /// (at most once a millisecond while passes follow each other) and before
  /// the loop sleeps. Null before the loop's first pass. Any thread.
  std::shared_ptr<const RegistrySnapshot> published() const {
    return std::atomic_load(&published_);
  }

  /// The nodes as the loop last published them, at the same moments as
  /// published() (GET /nodes). Any thread.
  PublishedNodes &published_nodes() { return published_nodes_; }
  /// The active leases likewise (GET /leases). Any thread.
  PublishedLeases &published_leases() { return published_leases_; }

  /// Tasks run so far (for tests).
  uint64_t tasks_run() const { return tasks_run_.load(); }

  /// Makes the loop run a pass soon, from any thread (an eventfd write).
  void wake() noexcept;

private:
  void submit(std::function<void()> task);
  void run();

  void deliver_events();
  /// Takes a snapshot into published_ and hands the changed nodes and
  /// leases to published_nodes_ and published_leases_ (loop thread only;
  /// never throws).
  void publish() noexcept;
  /// Runs one task; false for the stop marker.
  bool run_task(std::function<void()> &task);

  Registry &registry_;
  LoopDriver *driver_ = nullptr;
  NodeProvider *provider_ = nullptr;
  std::chrono::milliseconds tick_every_;
  std::chrono::microseconds busy_poll_{0};
  /// Sleeps between passes on the driver's descriptors and on wake_fd_,
  /// until `until` at the latest (the next tick, or a deferred commit).
  void sleep_until_work(std::chrono::steady_clock::time_point until);

  moodycamel::ReaderWriterQueue<std::function<void()>> queue_{256};
  /// An eventfd: written after every enqueue (and by wake()), read by the
  /// loop when it wakes.
  int wake_fd_ = -1;
  std::vector<int> wait_fds_;
  std::vector<int> ready_fds_;
  std::mutex producers_; // serialises enqueue only (single-producer queue)
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> tasks_run_{0};
  std::shared_ptr<const RegistrySnapshot> published_;
  PublishedNodes published_nodes_;
  PublishedLeases published_leases_;
  /// A fabric pass did work since the last publication (loop thread only).
  bool unpublished_ = false;
  std::chrono::steady_clock::time_point published_at_{};
  std::atomic<std::chrono::milliseconds> call_timeout_{std::chrono::milliseconds(0)};
  static constexpr int kQueued = 0, kStarted = 1, kWithdrawn = 2;
  std::thread thread_;
};

} // namespace rfaas::rm
