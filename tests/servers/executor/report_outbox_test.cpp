// The resource-manager link's report queue: its index of each lease's
// periodic report must find the same report a look through the queue would,
// however the queue changed (popped, the oldest periodic dropped, a final
// report in a periodic one's place).
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "executor_manager/report_outbox.hpp"

using rfaas::manager::ReportOutbox;
using rfaas::protocol::AccountingReport;

namespace {

AccountingReport report(uint64_t lease, uint64_t allocation_us, bool final = false) {
  AccountingReport r;
  r.lease_id = lease;
  r.allocation_us = allocation_us;
  r.final = final ? 1 : 0;
  return r;
}

/// (lease, allocation_us, final) of every queued report, front first.
std::vector<std::vector<uint64_t>> contents(ReportOutbox q) {
  std::vector<std::vector<uint64_t>> out;
  for (; !q.empty(); q.pop_front())
    out.push_back({q.front().lease_id, q.front().allocation_us, q.front().final});
  return out;
}

/// The same queue without an index: every replacement looks through it.
struct Model {
  std::deque<AccountingReport> queue;
  bool replace(const AccountingReport &r, size_t first) {
    for (size_t i = queue.size(); i-- > first;)
      if (queue[i].lease_id == r.lease_id && !queue[i].final) {
        queue[i] = r;
        return true;
      }
    return false;
  }
  bool drop_oldest_periodic(size_t first) {
    for (size_t i = first; i < queue.size(); ++i)
      if (!queue[i].final) {
        queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    return false;
  }
  std::vector<std::vector<uint64_t>> contents() const {
    std::vector<std::vector<uint64_t>> out;
    for (const AccountingReport &r : queue)
      out.push_back({r.lease_id, r.allocation_us, r.final});
    return out;
  }
};

} // namespace

TEST(ReportOutbox, ANewReportReplacesItsLeasesQueuedPeriodicOne) {
  ReportOutbox q;
  for (uint64_t lease = 1; lease <= 4; ++lease)
    q.push_back(report(lease, 10));
  EXPECT_TRUE(q.replace(report(3, 20), 0));
  EXPECT_TRUE(q.replace(report(2, 30, true), 0));
  // A final report is not replaced, and a lease without a report has none.
  EXPECT_FALSE(q.replace(report(2, 40), 0));
  EXPECT_FALSE(q.replace(report(9, 40), 0));
  EXPECT_EQ(contents(q),
            (std::vector<std::vector<uint64_t>>{{1, 10, 0}, {2, 30, 1}, {3, 20, 0}, {4, 10, 0}}));
}

TEST(ReportOutbox, TheReportInFlightIsLeftAsItIs) {
  ReportOutbox q;
  q.push_back(report(1, 10));
  q.push_back(report(2, 10));
  // Lease 1's report is in flight (position 0): a new one queues behind.
  EXPECT_FALSE(q.replace(report(1, 20), 1));
  q.push_back(report(1, 20));
  EXPECT_TRUE(q.replace(report(1, 30), 1));
  // The one in flight leaves: lease 1's queued report is still found.
  q.pop_front();
  EXPECT_TRUE(q.replace(report(1, 40), 0));
  EXPECT_EQ(contents(q), (std::vector<std::vector<uint64_t>>{{2, 10, 0}, {1, 40, 0}}));
}

TEST(ReportOutbox, ReportsBehindADroppedOneAreStillFound) {
  ReportOutbox q;
  q.push_back(report(1, 10, true));
  for (uint64_t lease = 2; lease <= 5; ++lease)
    q.push_back(report(lease, 10));
  EXPECT_TRUE(q.drop_oldest_periodic(0)); // lease 2's: the final one stays
  EXPECT_FALSE(q.replace(report(2, 20), 0));
  EXPECT_TRUE(q.replace(report(5, 20), 0));
  EXPECT_TRUE(q.replace(report(4, 20), 0));
  EXPECT_EQ(contents(q),
            (std::vector<std::vector<uint64_t>>{{1, 10, 1}, {3, 10, 0}, {4, 20, 0}, {5, 20, 0}}));
  EXPECT_TRUE(q.drop_oldest_periodic(0));
  EXPECT_TRUE(q.drop_oldest_periodic(0));
  EXPECT_TRUE(q.drop_oldest_periodic(0));
  EXPECT_FALSE(q.drop_oldest_periodic(0));
  EXPECT_EQ(q.size(), 1u);
}

// Random pushes, replacements, pops and drops over a few leases (so that
// reports of one lease meet), with and without a report in flight: the
// queue must always hold what the index-free model holds.
TEST(ReportOutbox, MatchesALookThroughTheQueue) {
  std::mt19937_64 rng(12345);
  ReportOutbox q;
  Model m;
  uint64_t value = 0;
  // A final report is its lease's last (RmLink never gets another): the
  // lease's place goes to a new one.
  std::vector<uint64_t> leases = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t next_lease = 9;
  for (int step = 0; step < 200000; ++step) {
    const size_t first = (!m.queue.empty() && rng() % 2) ? 1 : 0;
    uint64_t &lease = leases[rng() % leases.size()];
    const AccountingReport r = report(lease, ++value, rng() % 8 == 0);
    if (r.final)
      lease = next_lease++;
    switch (rng() % 4) {
    case 0:
    case 1: {
      // RmLink::report(): replace, else queue.
      const bool replaced = q.replace(r, first);
      ASSERT_EQ(replaced, m.replace(r, first)) << "step " << step;
      if (!replaced) {
        q.push_back(r);
        m.queue.push_back(r);
      }
      break;
    }
    case 2:
      if (!m.queue.empty()) {
        q.pop_front();
        m.queue.pop_front();
      }
      break;
    case 3:
      ASSERT_EQ(q.drop_oldest_periodic(first), m.drop_oldest_periodic(first)) << "step " << step;
      break;
    }
    ASSERT_EQ(q.size(), m.queue.size()) << "step " << step;
    if (step % 64 == 0) {
      ASSERT_EQ(contents(q), m.contents()) << "step " << step;
    }
  }
  EXPECT_EQ(contents(q), m.contents());
}
