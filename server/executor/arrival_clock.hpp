// The time at which a worker took an invocation off its queue: the start of
// the function's execution time and the end of a hot-polling period in the
// accounting. It is read between the completion and the function call, on
// the client's round trip, where steady_clock::now() costs ~35 ns in a KVM
// guest (kvm-clock through the vDSO) and the TSC about half of that.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace rfaas::executor_process {

/// steady_clock time points derived from the TSC where the CPU's TSC is
/// invariant (constant rate, not stopped in idle states): the last
/// steady_clock reading the worker made (note()) plus the TSC cycles since,
/// at the rate measured over the clock's whole life. The worker already reads
/// steady_clock once per invocation (after posting the result, off the round
/// trip) and every few dozen idle polls, so the TSC span it extrapolates is
/// microseconds long and the rate is known to parts per million after
/// kMinBaseline: the error is far below a nanosecond. Until then, and
/// without an invariant TSC, now() is steady_clock::now().
class ArrivalClock {
public:
  using Clock = std::chrono::steady_clock;

  /// The rate is trusted once the first and the last note() are this far
  /// apart: two steady_clock readings of ~50 ns jitter make it exact to
  /// 1e-5 at least.
  static constexpr std::chrono::milliseconds kMinBaseline{10};

  explicit ArrivalClock(bool use_tsc = tsc_is_invariant()) : tsc_(use_tsc) {}

  /// Whether this CPU's TSC is invariant (CPUID 0x80000007, EDX bit 8):
  /// hypervisors pass the bit on only when the guest's TSC keeps its rate.
  static bool tsc_is_invariant() noexcept {
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u)
      return false;
    __cpuid(0x80000007u, a, b, c, d);
    return (d & (1u << 8)) != 0;
#else
    return false;
#endif
  }

  bool uses_tsc() const noexcept { return tsc_; }
  /// Whether now() extrapolates from the TSC (an invariant TSC and a long
  /// enough baseline).
  bool calibrated() const noexcept { return ns_per_cycle_ > 0; }

  /// Record a steady_clock reading the caller just made, `t`, with the TSC
  /// beside it: the anchor of the next now() and a longer baseline for the
  /// rate.
  void note(Clock::time_point t) noexcept {
    if (!tsc_)
      return;
    const uint64_t c = cycles();
    if (first_c_ == 0) {
      first_t_ = t;
      first_c_ = c;
    } else if (c > first_c_ && t - first_t_ >= kMinBaseline) {
      ns_per_cycle_ =
          static_cast<double>((t - first_t_).count()) / static_cast<double>(c - first_c_);
    }
    last_t_ = t;
    last_c_ = c;
  }

  /// Now, as a steady_clock time point.
  Clock::time_point now() const noexcept {
    if (ns_per_cycle_ <= 0)
      return Clock::now();
    const uint64_t c = cycles();
    const double span = static_cast<double>(c - last_c_) * ns_per_cycle_;
    return last_t_ + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double, std::nano>(span));
  }

private:
  static uint64_t cycles() noexcept {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return 0;
#endif
  }

  bool tsc_;
  double ns_per_cycle_ = 0;
  Clock::time_point first_t_{}, last_t_{};
  uint64_t first_c_ = 0, last_c_ = 0;
};

} // namespace rfaas::executor_process
