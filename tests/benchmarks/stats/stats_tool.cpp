// Prints benchmarks/stats.hpp's figures of the numbers on stdin, in the
// format of `rfaas_stats.py summary`, so that stats_test.py can compare the
// C++ and Python implementations on the same samples.
#include "stats.hpp"

#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  namespace st = bench_stats;
  std::vector<double> v;
  for (double x; std::cin >> x;)
    v.push_back(x);
  std::sort(v.begin(), v.end());
  const st::Summary s = st::summarise_sorted(v);
  const st::Interval ci = st::median_ci95_sorted(v);
  std::printf("%zu %.17g %.17g %.17g %.17g %.17g ", s.n, s.median, s.p99, s.min, s.mean,
              st::iqm_sorted(v));
  if (ci.valid)
    std::printf("%.17g %.17g\n", ci.lo, ci.hi);
  else
    std::printf("- -\n");
  return 0;
}
