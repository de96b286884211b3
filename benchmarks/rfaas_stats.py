#!/usr/bin/python3
"""The statistics every benchmark reports, as benchmarks/stats.hpp computes
them for the C++ benchmarks: median, nearest-rank percentile, interquartile
mean and a distribution-free 95 % confidence interval of the median.
tests/benchmarks/stats/ checks that both agree.

As a module: `import rfaas_stats` (from benchmarks/ on sys.path).
As a command, for the shell scripts (numbers or "key,value" lines on stdin):

  rfaas_stats.py summary          n median p99 min mean iqm ci_lo ci_hi (ci "-" below 6)
  rfaas_stats.py median-by-key    "key,value" lines -> "key,median", keys in first-seen order
  rfaas_stats.py median X...      the median of the numbers given as arguments
  rfaas_stats.py ci95-rank N      the rank k of the interval x(k)..x(N+1-k) (0: none)
"""
import math
import sys


def median(values):
    """The middle value, or the mean of the two middle values for an even
    count; 0 when empty."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return 0.0
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def percentile(values, p):
    """Nearest rank, p in [0, 1]: the smallest sample with at least p * n
    samples at or below it (always a measured value); 0 when empty."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return 0.0
    rank = math.ceil(p * n)
    rank = rank - 1 if rank else 0
    return v[min(rank, n - 1)]


def iqm(values):
    """Interquartile mean: the mean of the sorted samples from index n//4 up
    to n - n//4; 0 when empty."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return 0.0
    lo, hi = n // 4, n - n // 4
    return sum(v[lo:hi]) / (hi - lo)


def ci95_rank(n):
    """The largest k with P(X < k) <= 2.5 %, X ~ Bin(n, 1/2): the median's
    95 % interval is then x(k)..x(n+1-k) (1-based). 0 for n < 6."""
    def pmf(j):
        return math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
                        - n * math.log(2.0))
    k, tail = 0, 0.0
    while k < n and tail + pmf(k) <= 0.025:
        tail += pmf(k)
        k += 1
    return k


def median_ci95(values):
    """(lo, hi) of the distribution-free 95 % confidence interval of the
    median, or None with fewer than 6 samples."""
    v = sorted(values)
    k = ci95_rank(len(v))
    if k == 0:
        return None
    return v[k - 1], v[len(v) - k]


def summary(values):
    """n, median, p99, min, mean, as the C++ benchmarks print them."""
    v = sorted(values)
    if not v:
        return {"n": 0, "median": 0.0, "p99": 0.0, "min": 0.0, "mean": 0.0}
    return {"n": len(v), "median": median(v), "p99": percentile(v, 0.99), "min": v[0],
            "mean": sum(v) / len(v)}


def _numbers(stream):
    return [float(tok) for line in stream for tok in line.replace(",", " ").split()]


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    cmd = argv[1]
    if cmd == "summary":
        v = _numbers(sys.stdin)
        s = summary(v)
        ci = median_ci95(v)
        ci_text = f"{ci[0]:.17g} {ci[1]:.17g}" if ci else "- -"
        print(f"{s['n']} {s['median']:.17g} {s['p99']:.17g} {s['min']:.17g} {s['mean']:.17g} "
              f"{iqm(v):.17g} {ci_text}")
    elif cmd == "median-by-key":
        groups = {}
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            key, _, value = line.rpartition(",")
            groups.setdefault(key, []).append(value.strip())
        for key, texts in groups.items():
            # The sample as written when the median is one (odd count, or
            # equal middle values), so the digits stay the benchmark's own.
            m = median(float(t) for t in texts)
            same = [t for t in texts if float(t) == m]
            print(f"{key},{same[0] if same else f'{m:.10g}'}")
    elif cmd == "median":
        print(f"{median(float(x) for x in argv[2:]):.17g}")
    elif cmd == "ci95-rank" and len(argv) == 3:
        print(ci95_rank(int(argv[2])))
    else:
        print(f"rfaas_stats.py: unknown command {' '.join(argv[1:])}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
