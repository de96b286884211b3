#!/usr/bin/python3
"""benchmarks/rfaas_stats.py against values computed by hand and exact
binomial tails, and against benchmarks/stats.hpp (through stats_tool, whose
path is argv[1]) on the same random samples."""
import os
import random
import subprocess
import sys
import unittest
from fractions import Fraction
from math import comb

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "benchmarks"))
import rfaas_stats as st  # noqa: E402

TOOL = None


def rank_errors(rank_of, ns):
    """The n for which rank_of(n) is not the largest k with P(X < k) <= 1/40,
    X ~ Bin(n, 1/2), computed with exact fractions."""
    bad = []
    for n in ns:
        def tail(k):
            return Fraction(sum(comb(n, j) for j in range(k)), 2 ** n)
        k = rank_of(n)
        ok = (k == 0 or tail(k) <= Fraction(1, 40)) and (k >= n or tail(k + 1) > Fraction(1, 40))
        if not ok:
            bad.append(n)
    return bad


class ByHand(unittest.TestCase):
    def test_median(self):
        self.assertEqual(st.median([3, 1, 2]), 2)
        self.assertEqual(st.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(st.median([]), 0)

    def test_percentile(self):
        v = list(range(100, 0, -1))
        self.assertEqual(st.percentile(v, 0.99), 99)
        self.assertEqual(st.percentile(v, 0.0), 1)
        self.assertEqual(st.percentile(v, 1.0), 100)
        self.assertEqual(st.percentile(range(1, 11), 0.99), 10)

    def test_iqm(self):
        self.assertEqual(st.iqm(range(1, 9)), 4.5)
        self.assertEqual(st.iqm([1, 2, 3, 4, 5, 6, 7, 8, 1000, -1000]), 27 / 6)

    def test_ci_order_statistics(self):
        # n = 6: x(1)..x(6); n = 9: x(2)..x(8); n = 25: x(8)..x(18).
        for n, lo, hi in ((6, 1, 6), (9, 2, 8), (25, 8, 18)):
            v = list(range(n, 0, -1))
            self.assertEqual(st.median_ci95(v), (lo, hi), n)
        self.assertIsNone(st.median_ci95(range(5)))

    def test_rank_is_exact(self):
        self.assertEqual(rank_errors(st.ci95_rank, range(0, 301)), [])

    def test_wrong_rank_is_caught(self):
        # The check above must fail for a k one off in either direction.
        self.assertTrue(rank_errors(lambda n: st.ci95_rank(n) + 1, range(6, 60)))
        self.assertTrue(rank_errors(lambda n: max(0, st.ci95_rank(n) - 1), range(6, 60)))

    def test_median_command(self):
        # What benchmarks/cluster/'s awk summaries call.
        out = subprocess.run([sys.executable, st.__file__, "median", "4", "1", "3", "2"],
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(float(out), 2.5)

    def test_median_by_key_keeps_digits(self):
        out = subprocess.run([sys.executable, st.__file__, "median-by-key"],
                             input="a,1.500\nb,3\na,2.250\na,0.100\nb,4\n",
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(out, "a,1.500\nb,3.5\n")


@unittest.skipUnless(os.environ.get("RFAAS_STATS_TOOL"), "RFAAS_STATS_TOOL (the C++ stats_tool) not set")
class AgainstCpp(unittest.TestCase):
    def cpp(self, values):
        out = subprocess.run([os.environ["RFAAS_STATS_TOOL"]], input=" ".join(map(repr, values)),
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def py(self, values):
        out = subprocess.run([sys.executable, st.__file__, "summary"],
                             input=" ".join(map(repr, values)),
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def test_same_figures(self):
        rng = random.Random(39)
        cases = [[], [1.0], [2.0, 1.0], list(range(1, 26))]
        cases += [[rng.lognormvariate(0, 1) for _ in range(n)]
                  for n in (3, 6, 7, 9, 10, 25, 100, 101, 1000)]
        for v in cases:
            c, p = self.cpp(v), self.py(v)
            self.assertEqual(c[0], p[0], v)
            for a, b in zip(c[1:], p[1:]):
                if a == "-" or b == "-":
                    self.assertEqual(a, b, v)
                else:
                    self.assertAlmostEqual(float(a), float(b), delta=1e-12 * max(1.0, abs(float(a))))


if __name__ == "__main__":
    unittest.main(verbosity=2)
