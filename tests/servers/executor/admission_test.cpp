// The executor manager's admission bookkeeping (admission.hpp), without a
// network: limits, eviction order, deadlines and counters. The real manager
// under a flood is tests/servers/executor/hostile_test.sh.
#include <gtest/gtest.h>

#include "executor_manager/admission.hpp"

using rfaas::manager::Admission;
using rfaas::manager::AdmissionConfig;
using std::chrono::milliseconds;

namespace {

AdmissionConfig limits(uint32_t total, uint32_t per_peer, uint32_t request_ms = 1000) {
  AdmissionConfig c;
  c.max_pending = total;
  c.max_pending_per_peer = per_peer;
  c.request_ms = request_ms;
  c.stats_interval_s = 1;
  return c;
}

} // namespace

TEST(Admission, PerPeerLimitRefusesOnlyThatPeer) {
  Admission a(limits(10, 2));
  auto t0 = Admission::Clock::now();
  EXPECT_TRUE(a.may_admit("10.0.0.1", t0));
  a.admitted("10.0.0.1", t0);
  a.admitted("10.0.0.1", t0);
  EXPECT_FALSE(a.may_admit("10.0.0.1", t0));
  EXPECT_TRUE(a.may_admit("10.0.0.2", t0));
  EXPECT_EQ(a.counters().refused_per_peer, 1u);
  EXPECT_EQ(a.pending_from("10.0.0.1"), 2u);
}

TEST(Admission, TotalLimitEvictsTheOldestOfTheBusiestPeer) {
  Admission a(limits(4, 4));
  auto t0 = Admission::Clock::now();
  Admission::Ticket b1 = a.admitted("b", t0);
  Admission::Ticket f1 = a.admitted("flood", t0);
  a.admitted("flood", t0);
  a.admitted("flood", t0);
  EXPECT_TRUE(a.may_admit("new", t0));
  Admission::Ticket v = a.victim(t0);
  EXPECT_EQ(v, f1); // not b1, although older: "flood" holds the most
  EXPECT_NE(v, b1);
  a.released(v);
  EXPECT_EQ(a.victim(t0), 0u); // room now
  a.admitted("new", t0);
  EXPECT_EQ(a.pending(), 4u);
  EXPECT_EQ(a.counters().evicted_full, 1u);
  EXPECT_EQ(a.counters().peak_pending, 4u);
}

TEST(Admission, AmongEqualPeersTheOldestGoes) {
  Admission a(limits(3, 1));
  auto t0 = Admission::Clock::now();
  Admission::Ticket first = a.admitted("p1", t0);
  a.admitted("p2", t0);
  a.admitted("p3", t0);
  EXPECT_EQ(a.victim(t0), first);
}

TEST(Admission, GrantedConnectionsLeaveThePendingSet) {
  Admission a(limits(2, 2, 100));
  auto t0 = Admission::Clock::now();
  Admission::Ticket t1 = a.admitted("p", t0);
  Admission::Ticket t2 = a.admitted("p", t0);
  a.granted(t1);
  EXPECT_EQ(a.pending(), 1u);
  EXPECT_TRUE(a.may_admit("p", t0));
  // Only the one still pending expires; granting or releasing twice is harmless.
  std::vector<Admission::Ticket> gone = a.expired(t0 + milliseconds(101));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], t2);
  a.released(t2);
  a.released(t2);
  a.granted(t1);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.pending_from("p"), 0u);
  EXPECT_EQ(a.counters().granted, 1u);
  EXPECT_EQ(a.counters().evicted_deadline, 1u);
}

TEST(Admission, DeadlinesExpireOldestFirstAndOnlyOnce) {
  Admission a(limits(10, 10, 100));
  auto t0 = Admission::Clock::now();
  Admission::Ticket old = a.admitted("p", t0);
  Admission::Ticket young = a.admitted("q", t0 + milliseconds(80));
  EXPECT_TRUE(a.expired(t0 + milliseconds(100)).empty());
  std::vector<Admission::Ticket> gone = a.expired(t0 + milliseconds(150));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], old);
  a.released(old);
  gone = a.expired(t0 + milliseconds(200));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], young);
}

TEST(Admission, CountersAreReportedWhenTheyChange) {
  Admission a(limits(10, 1));
  auto t0 = Admission::Clock::now();
  a.admitted("p", t0);
  EXPECT_FALSE(a.may_admit("p", t0));
  a.bad_input("garbage", t0);
  a.setup_failed("p", "timed out", t0);
  std::string line = a.periodic(t0 + std::chrono::seconds(2));
  EXPECT_NE(line.find("1 pending now"), std::string::npos) << line;
  EXPECT_NE(line.find("1 refused (per-peer limit)"), std::string::npos) << line;
  EXPECT_NE(line.find("1 failed during setup"), std::string::npos) << line;
  EXPECT_NE(line.find("1 malformed"), std::string::npos) << line;
  // Nothing new: no line.
  EXPECT_EQ(a.periodic(t0 + std::chrono::seconds(4)), "");
  EXPECT_EQ(a.describe(), line);
}

TEST(Admission, ManyRefusalsAreCountedEvenWhenTheLogIsThrottled) {
  Admission a(limits(10, 1));
  auto t0 = Admission::Clock::now();
  a.admitted("p", t0);
  for (int i = 0; i < 10000; ++i)
    EXPECT_FALSE(a.may_admit("p", t0 + milliseconds(i / 100)));
  EXPECT_EQ(a.counters().refused_per_peer, 10000u);
  a.flush(t0 + std::chrono::seconds(1));
}
