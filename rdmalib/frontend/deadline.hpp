// A point in monotonic time by which a blocking step must end: every loop of
// rdmalib that waits (posts retried on a full queue, waits for completions,
// connection setup) measures itself against one of these.
#pragma once

#include <chrono>
#include <climits>
#include <csignal>

namespace rdmalib::detail {

class Deadline {
public:
  using clock = std::chrono::steady_clock;

  /// `ms` from now; a negative duration is already passed. With `cancel`
  /// (ConnectionOptions::cancel), it has also passed once *cancel is
  /// non-zero: every loop that measures itself against it ends at its next
  /// look, between two provider calls.
  explicit Deadline(std::chrono::milliseconds ms,
                    const volatile std::sig_atomic_t *cancel = nullptr) noexcept
      : at_(clock::now() + ms), cancel_(cancel) {}

  /// A deadline that never passes (Operations::wait with a negative timeout).
  static Deadline never() noexcept { return Deadline(clock::time_point::max()); }

  bool cancelled() const noexcept { return cancel_ && *cancel_; }
  bool passed() const noexcept { return cancelled() || clock::now() >= at_; }
  bool unbounded() const noexcept { return at_ == clock::time_point::max(); }

  /// Milliseconds left, rounded up (0 only once passed()), at most `cap`
  /// (also for never()): a sleep of that long does not end before the
  /// deadline.
  int remaining_ms(int cap = INT_MAX) const noexcept {
    if (cancelled())
      return 0;
    if (unbounded())
      return cap;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(at_ - clock::now()).count();
    if (left <= 0)
      return 0;
    return left > cap ? cap : static_cast<int>(left);
  }

  /// remaining_ms() as a duration.
  std::chrono::milliseconds remaining(int cap = INT_MAX) const noexcept {
    return std::chrono::milliseconds(remaining_ms(cap));
  }

private:
  explicit Deadline(clock::time_point at) noexcept : at_(at) {}
  clock::time_point at_;
  const volatile std::sig_atomic_t *cancel_ = nullptr;
};

} // namespace rdmalib::detail
