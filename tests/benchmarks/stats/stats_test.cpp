// benchmarks/stats.hpp against values computed by hand.
#include "stats.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace st = bench_stats;

namespace {
// 1, 2, ..., n in a shuffled order: the order statistic x(i) is i.
std::vector<double> one_to(size_t n) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 1.0);
  for (size_t i = 0; i < n; ++i)
    std::swap(v[i], v[(i * 7 + 3) % n]);
  return v;
}
} // namespace

TEST(BenchStats, MedianOddEvenEmpty) {
  EXPECT_DOUBLE_EQ(st::median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(st::median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(st::median({7}), 7);
  EXPECT_DOUBLE_EQ(st::median({}), 0);
}

TEST(BenchStats, NearestRankPercentile) {
  const auto v = one_to(100);
  EXPECT_DOUBLE_EQ(st::percentile(v, 0.99), 99);
  EXPECT_DOUBLE_EQ(st::percentile(v, 0.5), 50);
  EXPECT_DOUBLE_EQ(st::percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(st::percentile(v, 1), 100);
  // ceil(0.99 * 10) = 10: the maximum of ten samples.
  EXPECT_DOUBLE_EQ(st::percentile(one_to(10), 0.99), 10);
  EXPECT_DOUBLE_EQ(st::percentile({}, 0.99), 0);
}

TEST(BenchStats, InterquartileMean) {
  // n = 8: indices 2..5 of 1..8, i.e. 3, 4, 5, 6.
  EXPECT_DOUBLE_EQ(st::iqm(one_to(8)), 4.5);
  // n = 10: indices 2..7, i.e. 3..8; the outliers do not count.
  EXPECT_DOUBLE_EQ(st::iqm({1, 2, 3, 4, 5, 6, 7, 8, 1000, -1000}), (2 + 3 + 4 + 5 + 6 + 7) / 6.0);
  EXPECT_DOUBLE_EQ(st::iqm({5}), 5);
}

TEST(BenchStats, Ci95RankByHand) {
  // P(X < 1) = 1/64 <= 2.5 % < P(X < 2) = 7/64.
  EXPECT_EQ(st::ci95_rank(6), 1u);
  // P(X < 2) = 10/512 = 1.95 % <= 2.5 % < P(X < 3) = 46/512.
  EXPECT_EQ(st::ci95_rank(9), 2u);
  // P(X < 8) = 2.16 % <= 2.5 % < P(X < 9) = 5.39 %.
  EXPECT_EQ(st::ci95_rank(25), 8u);
  for (size_t n = 0; n < 6; ++n)
    EXPECT_EQ(st::ci95_rank(n), 0u) << n;
  // Large n does not underflow: k ~ n/2 - 0.98 sqrt(n).
  EXPECT_NEAR(static_cast<double>(st::ci95_rank(4000)), 2000 - 0.98 * std::sqrt(4000.0), 2);
}

TEST(BenchStats, MedianCi95OrderStatistics) {
  auto ci = st::median_ci95(one_to(6));
  ASSERT_TRUE(ci.valid);
  EXPECT_DOUBLE_EQ(ci.lo, 1);
  EXPECT_DOUBLE_EQ(ci.hi, 6);
  ci = st::median_ci95(one_to(9));
  ASSERT_TRUE(ci.valid);
  EXPECT_DOUBLE_EQ(ci.lo, 2);
  EXPECT_DOUBLE_EQ(ci.hi, 8);
  ci = st::median_ci95(one_to(25));
  ASSERT_TRUE(ci.valid);
  EXPECT_DOUBLE_EQ(ci.lo, 8);
  EXPECT_DOUBLE_EQ(ci.hi, 18);
  EXPECT_FALSE(st::median_ci95(one_to(5)).valid);
}

TEST(BenchStats, Summary) {
  const auto s = st::summarise_sorted({1, 2, 3, 10});
  EXPECT_EQ(s.n, 4u);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.p99, 10);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.mean, 4);
}
