#include "resource_manager/loop.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace {
std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}
} // namespace

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

bool Loop::run_task(std::function<void()> &task) {
  if (!task)
    return !stopping_; // the stop marker (or a spurious wake-up)
  task();              // a packaged_task: exceptions travel to the caller's future
  task = nullptr;
  ++tasks_run_;
  deliver_events();
  return true;
}

void Loop::run() {
  auto next_tick = std::chrono::steady_clock::now();
  std::function<void()> task;
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
    }
    bool worked = false;
    if (driver_) {
      try {
        worked = driver_->poll(registry_);
      } catch (const std::exception &e) {
        log()->error("fabric pass failed: {}", e.what());
      }
      deliver_events();
      // Tasks queued meanwhile run now, a bounded batch per pass, so a
      // flood of REST calls cannot starve the fabric either.
      for (int i = 0; i < 64 && queue_.try_dequeue(task); ++i) {
        worked = true;
        if (!run_task(task)) {
          driver_->stop(registry_);
          return;
        }
      }
      if (worked)
        continue;
    }
    // A negative timeout means "forever" to readerwriterqueue: clamp it.
    auto wait = std::chrono::duration_cast<std::chrono::microseconds>(
        next_tick - std::chrono::steady_clock::now());
    if (driver_)
      wait = std::min(wait, std::chrono::microseconds(driver_->busy() ? 1000 : 10000));
    if (wait.count() < 0)
      wait = std::chrono::microseconds(0);
    if (!queue_.wait_dequeue_timed(task, wait))
      continue;
    if (!run_task(task)) {
      // Tasks enqueued before the stop marker have run; none can follow it.
      if (driver_)
        driver_->stop(registry_);
      return;
    }
  }
}

} // namespace rfaas::rm
