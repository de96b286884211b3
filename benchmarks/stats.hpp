// The statistics every benchmark reports: median, nearest-rank percentile,
// interquartile mean and a distribution-free 95 % confidence interval of the
// median. One definition for all C++ benchmarks; benchmarks/rfaas_stats.py
// is the same in Python for the scripts and plot.py, and
// tests/benchmarks/stats/ checks that both agree.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace bench_stats {

/// The median of values sorted ascending: the middle value, or the mean of
/// the two middle values for an even count (so that two runs of a benchmark
/// with the same samples in another order report the same figure). 0 when
/// empty, which the benchmarks print as "no measurement".
inline double median_sorted(const std::vector<double> &sorted) {
  const size_t n = sorted.size();
  if (n == 0)
    return 0;
  return (n % 2) ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/// The median of unsorted values (sorts a copy).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_sorted(v);
}

/// The nearest-rank percentile of values sorted ascending, `p` in [0, 1]:
/// the smallest sample with at least p * n samples at or below it. Always a
/// measured value (never interpolated), so a p99 is a round trip that
/// happened. 0 when empty.
inline double percentile_sorted(const std::vector<double> &sorted, double p) {
  const size_t n = sorted.size();
  if (n == 0)
    return 0;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(n)));
  rank = rank ? rank - 1 : 0;
  return sorted[std::min(rank, n - 1)];
}

/// The nearest-rank percentile of unsorted values (sorts a copy).
inline double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, p);
}

/// The interquartile mean of values sorted ascending: the mean of the
/// samples from index floor(n/4) up to n - floor(n/4). As robust to outliers
/// as the median but not bound to the clock's steps: steady_clock advances in
/// ~10 ns steps on small VMs, so a median of a 0.5 us round trip moves in ~2 %
/// jumps while the mean of the middle half does not. 0 when empty.
inline double iqm_sorted(const std::vector<double> &sorted) {
  const size_t n = sorted.size();
  if (n == 0)
    return 0;
  const size_t lo = n / 4, hi = n - n / 4;
  double sum = 0;
  for (size_t i = lo; i < hi; ++i)
    sum += sorted[i];
  return sum / static_cast<double>(hi - lo);
}

/// The interquartile mean of unsorted values (sorts a copy).
inline double iqm(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return iqm_sorted(v);
}

/// The rank k of the 95 % confidence interval of a median of n samples: the
/// largest k with P(X < k) <= 2.5 %, X ~ Bin(n, 1/2). The interval is then
/// the order statistics x(k)..x(n+1-k) (1-based), whatever the distribution
/// of the samples. 0 for n < 6, where no such interval exists.
inline size_t ci95_rank(size_t n) {
  // P(X = j) from log-gamma: 2^-n underflows a double from n = 1075 on.
  const double dn = static_cast<double>(n);
  auto pmf = [&](size_t j) {
    const double dj = static_cast<double>(j);
    return std::exp(std::lgamma(dn + 1) - std::lgamma(dj + 1) - std::lgamma(dn - dj + 1) -
                    dn * std::log(2.0));
  };
  size_t k = 0;
  double tail = 0; // P(X < k)
  while (k < n && tail + pmf(k) <= 0.025) {
    tail += pmf(k);
    ++k;
  }
  return k;
}

/// A confidence interval; `valid` is false when too few samples give none.
struct Interval {
  double lo = 0, hi = 0;
  bool valid = false;
};

/// The distribution-free 95 % confidence interval of the median of values
/// sorted ascending (see ci95_rank).
inline Interval median_ci95_sorted(const std::vector<double> &sorted) {
  const size_t n = sorted.size();
  const size_t k = ci95_rank(n);
  if (k == 0)
    return {};
  return {sorted[k - 1], sorted[n - k], true};
}

/// The same of unsorted values (sorts a copy).
inline Interval median_ci95(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_ci95_sorted(v);
}

/// What a benchmark prints per measurement: count, median, p99, minimum, mean.
struct Summary {
  size_t n = 0;
  double median = 0, p99 = 0, min = 0, mean = 0;
};

/// The summary of values sorted ascending.
inline Summary summarise_sorted(const std::vector<double> &sorted) {
  Summary s;
  s.n = sorted.size();
  if (s.n == 0)
    return s;
  s.median = median_sorted(sorted);
  s.p99 = percentile_sorted(sorted, 0.99);
  s.min = sorted.front();
  double sum = 0;
  for (double x : sorted)
    sum += x;
  s.mean = sum / static_cast<double>(s.n);
  return s;
}

} // namespace bench_stats
