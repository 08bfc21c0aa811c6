import numpy as np
import pytest

from profkit import intervals as iv


def cover(pairs, n):
    """Independent check: a boolean grid of covered integer points."""
    grid = np.zeros(n, dtype=bool)
    for s, e in zip(*pairs):
        grid[s:e] = True
    return grid


@pytest.mark.parametrize("seed", range(20))
def test_algebra_matches_a_grid(seed):
    rng = np.random.default_rng(seed)
    n = 500

    def random_set(k):
        s = rng.integers(0, n - 20, k)
        return s, s + rng.integers(0, 40, k)

    a = iv.union(*random_set(30))
    b = iv.union(*random_set(25))
    ga, gb = cover(a, n + 50), cover(b, n + 50)
    assert np.all(a[0][1:] > a[1][:-1])  # disjoint and sorted
    assert iv.total(a) == ga.sum()
    assert np.array_equal(cover(iv.intersect(a, b), n + 50), ga & gb)
    assert np.array_equal(cover(iv.subtract(a, b), n + 50), ga & ~gb)
    gaps = iv.complement(a, 0, n)
    assert np.array_equal(cover(gaps, n + 50)[:n], ~ga[:n])


def test_touching_intervals_merge_and_empty_ones_vanish():
    starts, ends = iv.union([0, 10, 30], [10, 20, 30])
    assert starts.tolist() == [0] and ends.tolist() == [20]


def test_per_window_matches_a_grid():
    rng = np.random.default_rng(7)
    s = rng.integers(0, 900, 60)
    a = iv.union(s, s + rng.integers(1, 50, 60))
    w_starts, w_ends = np.array([0, 100, 350, 700]), np.array([100, 300, 600, 1000])
    grid = cover(a, 1100)
    expected = [grid[lo:hi].sum() for lo, hi in zip(w_starts, w_ends)]
    assert iv.per_window(a, w_starts, w_ends).tolist() == expected
