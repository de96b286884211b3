// The arrival clock: TSC-derived steady_clock time points must stay within a
// few microseconds of steady_clock itself, never run backwards across an
// anchor, and fall back to steady_clock until calibrated or without an
// invariant TSC.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "executor/arrival_clock.hpp"

using rfaas::executor_process::ArrivalClock;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Notes a reading every ~50 us for `span`, as a polling worker would.
void feed(ArrivalClock &c, std::chrono::milliseconds span) {
  const auto until = Clock::now() + span;
  while (Clock::now() < until) {
    c.note(Clock::now());
    std::this_thread::sleep_for(50us);
  }
  // One reading at the end or past it: a thread descheduled for the last few
  // milliseconds of the span (a loaded sanitizer run) left none there.
  c.note(Clock::now());
}

long long abs_ns(Clock::duration d) {
  long long n = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return n < 0 ? -n : n;
}

} // namespace

TEST(ArrivalClock, WithoutTscIsSteadyClock) {
  ArrivalClock c(false);
  feed(c, 20ms);
  EXPECT_FALSE(c.calibrated());
  const auto before = Clock::now();
  const auto t = c.now();
  const auto after = Clock::now();
  EXPECT_LE(before, t);
  EXPECT_LE(t, after);
}

TEST(ArrivalClock, UncalibratedUntilTheBaselineIsLongEnough) {
  if (!ArrivalClock::tsc_is_invariant())
    GTEST_SKIP() << "this CPU reports no invariant TSC: the clock is steady_clock only";
  ArrivalClock c;
  c.note(Clock::now());
  c.note(Clock::now());
  EXPECT_FALSE(c.calibrated()) << "calibrated on a baseline shorter than kMinBaseline";
  feed(c, ArrivalClock::kMinBaseline + 5ms);
  EXPECT_TRUE(c.calibrated());
}

TEST(ArrivalClock, TracksSteadyClock) {
  if (!ArrivalClock::tsc_is_invariant())
    GTEST_SKIP() << "this CPU reports no invariant TSC: the clock is steady_clock only";
  ArrivalClock c;
  feed(c, 30ms);
  ASSERT_TRUE(c.calibrated());
  // Extrapolated over 0, 100 us and 2 ms past the last anchor: within 2 us
  // of the steady_clock readings on both sides (a loaded host may preempt
  // between the three reads, hence the bracket rather than a point).
  for (auto gap : {0us, 100us, 2000us}) {
    const auto anchor = Clock::now();
    c.note(anchor);
    std::this_thread::sleep_for(gap);
    const auto before = Clock::now();
    const auto t = c.now();
    const auto after = Clock::now();
    EXPECT_GE(t, before - 2us) << "gap " << gap.count() << " us: " << abs_ns(t - before)
                               << " ns early";
    EXPECT_LE(t, after + 2us) << "gap " << gap.count() << " us: " << abs_ns(t - after)
                              << " ns late";
    EXPECT_GE(t, anchor) << "ran backwards past its anchor";
  }
}
