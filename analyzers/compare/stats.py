"""Did two samples of step times move? The Hodges-Lehmann shift (the median of every
difference new - base) with its confidence interval from inverting the Mann-Whitney test.

Distribution-free, so one slow step that the step selection kept moves the estimate little,
and exact for the few steps a profile holds (3-20 per side): the interval is a pair of order
statistics of the differences, cut where the Mann-Whitney U statistic's null distribution
puts (1 - confidence) / 2 in each tail. Too few steps for any cut at that confidence (3 and
3 steps: the most extreme ordering still has probability 0.1) gives no interval at all
rather than a made-up noise figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

EXACT_MAX_PAIRS = 2500  # n x m up to this: exact null distribution; beyond, the normal one
_EPS = 1e-9  # float slack when comparing a tail probability with alpha / 2


@dataclass(frozen=True)
class Shift:
    """How far ``new`` lies from ``base`` (same unit as the samples)."""

    estimate: float  # Hodges-Lehmann: median of the n x m differences new - base
    low: float  # the interval's ends
    high: float
    confidence: float  # the interval's actual coverage (>= the one asked for)
    n_base: int
    n_new: int


def u_null_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u) for u = 0 .. n*m, U the Mann-Whitney count of pairs (base_i > new_j) of
    samples of sizes n and m from one continuous distribution. The counts of each U are
    the coefficients of the Gaussian binomial [n+m choose n]_q = prod_i (1 - q^(m+i)) /
    (1 - q^i), built one factor at a time as power series cut at degree n*m."""
    size = n * m + 1
    c = np.zeros(size)
    c[0] = 1.0
    for i in range(1, n + 1):
        k = m + i
        if k < size:
            c[k:] -= c[:-k].copy()  # times (1 - q^k)
        # divided by (1 - q^i): a running sum over every i-th coefficient
        pad = (-size) % i
        c = np.cumsum(np.concatenate([c, np.zeros(pad)]).reshape(-1, i), axis=0).ravel()[:size]
    return np.cumsum(c) / c.sum()


def _cut(n: int, m: int, confidence: float) -> tuple[int, float]:
    """(k, coverage): the interval runs from the k-th smallest to the k-th largest
    difference; k = 0 when no interval reaches ``confidence``."""
    half = (1.0 - confidence) / 2
    if n * m <= EXACT_MAX_PAIRS:
        cdf = u_null_cdf(n, m)
        k = int(np.searchsorted(cdf, half + _EPS, side="right"))
        return k, (1.0 - 2 * float(cdf[k - 1])) if k else 0.0
    z = NormalDist().inv_cdf(1 - half)
    k = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    return max(k, 0), confidence


def shift_interval(base: np.ndarray, new: np.ndarray, confidence: float) -> Shift | None:
    """The shift of ``new`` against ``base`` and its ``confidence`` interval; None when
    the samples are too small for any interval at that confidence."""
    base, new = np.asarray(base, float), np.asarray(new, float)
    n, m = len(base), len(new)
    if not n or not m:
        return None
    k, coverage = _cut(n, m, confidence)
    if k < 1:
        return None
    diffs = np.sort((new[None, :] - base[:, None]).ravel())
    return Shift(float(np.median(diffs)), float(diffs[k - 1]), float(diffs[n * m - k]),
                 coverage, n, m)


def min_steps(confidence: float) -> int:
    """The fewest steps per side (equal sizes) that give an interval at ``confidence``."""
    n = 1
    while _cut(n, n, confidence)[0] < 1:
        n += 1
    return n
