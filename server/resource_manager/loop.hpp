// The loop thread that owns the Registry. Other threads (the HTTP server's,
// and the fabric side once it exists) never touch the registry: they hand a
// task to the loop through a readerwriterqueue and wait for its answer.
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
#include <thread>
#include <type_traits>

#include <readerwriterqueue/readerwriterqueue.h>

#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// The loop has stopped: a task submitted now is never run.
class LoopStopped : public std::runtime_error {
public:
  LoopStopped() : std::runtime_error("the resource manager is shutting down") {}
};

class Loop {
public:
  /// `tick_every`: how often Registry::tick runs (expiry, heartbeats).
  Loop(Registry &registry, std::chrono::milliseconds tick_every);
  ~Loop();
  Loop(const Loop &) = delete;
  Loop &operator=(const Loop &) = delete;

  void start();
  /// Runs the queued tasks still waiting, then ends the thread.
  void stop();

  /// Runs `f(registry)` on the loop thread and returns its result; rethrows
  /// what it threw. Throws LoopStopped if the loop is not running.
  template <class F> auto call(F f) -> std::invoke_result_t<F, Registry &> {
    using R = std::invoke_result_t<F, Registry &>;
    auto task = std::make_shared<std::packaged_task<R()>>(
        [this, f = std::move(f)]() mutable { return f(registry_); });
    std::future<R> answer = task->get_future();
    submit([task] { (*task)(); });
    return answer.get();
  }

  /// Tasks run so far (for tests).
  uint64_t tasks_run() const { return tasks_run_.load(); }

private:
  void submit(std::function<void()> task);
  void run();

  Registry &registry_;
  std::chrono::milliseconds tick_every_;
  moodycamel::BlockingReaderWriterQueue<std::function<void()>> queue_{256};
  std::mutex producers_; // serialises enqueue only (single-producer queue)
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> tasks_run_{0};
  std::thread thread_;
};

} // namespace rfaas::rm
