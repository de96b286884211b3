// Accounting totals: messages plus the remote-atomic record, saturating.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "executor_manager/accounting.hpp"

using rfaas::manager::AllocationAccounting;
using rfaas::protocol::AccountingCounters;

TEST(Accounting, SumsMessages) {
  AllocationAccounting a;
  a.add({1000, 200, 30, 4});
  a.add({1000, 0, 70, 6});
  AccountingCounters t = a.totals(nullptr);
  EXPECT_EQ(t.allocation_ns, 2000u);
  EXPECT_EQ(t.hot_polling_ns, 200u);
  EXPECT_EQ(t.execution_ns, 100u);
  EXPECT_EQ(t.invocations, 10u);
}

TEST(Accounting, AddsTheAtomicRecord) {
  AllocationAccounting a;
  a.add({1, 2, 3, 4});
  uint64_t record[4] = {10, 20, 30, 40}; // as executors' fetch_adds leave it
  AccountingCounters t = a.totals(record);
  EXPECT_EQ(t.allocation_ns, 11u);
  EXPECT_EQ(t.hot_polling_ns, 22u);
  EXPECT_EQ(t.execution_ns, 33u);
  EXPECT_EQ(t.invocations, 44u);
}

TEST(Accounting, Saturates) {
  AllocationAccounting a;
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  a.add({max - 1, 0, 0, max});
  a.add({5, 0, 0, 1});
  uint64_t record[4] = {7, 0, 0, 0};
  AccountingCounters t = a.totals(record);
  EXPECT_EQ(t.allocation_ns, max);
  EXPECT_EQ(t.invocations, max);
}

TEST(Accounting, Describe) {
  std::string s = AllocationAccounting::describe({1500000000, 250000000, 1234, 42});
  EXPECT_EQ(s, "allocation 1.500 s, hot polling 0.250 s, execution 0.000001 s, invocations 42");
}
