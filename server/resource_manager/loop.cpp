#include "resource_manager/loop.hpp"

#include <spdlog/spdlog.h>

namespace rfaas::rm {

Loop::Loop(Registry &registry, std::chrono::milliseconds tick_every)
    : registry_(registry), tick_every_(tick_every) {}

Loop::~Loop() { stop(); }

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
    queue_.enqueue(nullptr); // wakes the loop
  }
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
}

void Loop::run() {
  auto log = spdlog::get("resource_manager");
  if (!log)
    log = spdlog::default_logger();
  auto next_tick = std::chrono::steady_clock::now();
  std::function<void()> task;
  for (;;) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      try {
        registry_.tick();
        for (const LeaseEnded &e : registry_.take_events())
          // Delivered to the node by the fabric side once it exists.
          log->debug("lease {} ended on node {} ({})", e.lease_id, e.node, to_string(e.why));
      } catch (const std::exception &e) {
        log->error("periodic check failed: {}", e.what());
      }
      next_tick = now + tick_every_;
    }
    // A negative timeout means "forever" to readerwriterqueue: clamp it.
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
        next_tick - std::chrono::steady_clock::now());
    if (wait.count() < 0)
      wait = std::chrono::microseconds(0);
    if (!queue_.wait_dequeue_timed(task, wait))
      continue;
    if (!task) {
      if (stopping_) {
        // Tasks enqueued before the stop marker have run; none can follow it.
        return;
      }
      continue;
    }
    task(); // a packaged_task: exceptions travel to the caller's future
    task = nullptr;
    ++tasks_run_;
  }
}

} // namespace rfaas::rm
