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


def test_covered_each_of_windows_matches_a_grid():
    rng = np.random.default_rng(7)
    s = rng.integers(0, 900, 60)
    a = iv.union(s, s + rng.integers(1, 50, 60))
    w_starts, w_ends = np.array([0, 100, 350, 700]), np.array([100, 300, 600, 1000])
    grid = cover(a, 1100)
    expected = [grid[lo:hi].sum() for lo, hi in zip(w_starts, w_ends)]
    assert iv.covered_each(a, w_starts, w_ends).tolist() == expected


def _brute_innermost(starts, ends, q_lo, q_hi):
    """The holder of each query by definition: of the ranges holding it, the latest start,
    of those the shortest (ranges that nest: the innermost)."""
    out = []
    for lo, hi in zip(q_lo, q_hi):
        holders = [i for i, (s, e) in enumerate(zip(starts, ends)) if s <= lo and e >= hi]
        out.append(max(holders, key=lambda i: (starts[i], -ends[i])) if holders else -1)
    return out


def _grow(rng, starts, ends, lo, hi, depth):
    """A range [lo, hi] and, inside it, up to two children apart, ``depth`` levels down."""
    starts.append(lo)
    ends.append(hi)
    if depth == 0 or hi - lo < 4:
        return
    cut = np.sort(rng.choice(np.arange(lo, hi + 1), size=4, replace=False))
    for a, b in ((cut[0], cut[1]), (cut[2], cut[3])):
        if b > a and rng.random() < 0.8:
            _grow(rng, starts, ends, int(a), int(b), depth - 1)


def test_innermost_of_nested_ranges_matches_the_definition():
    rng = np.random.default_rng(7)
    for _ in range(200):
        # a random nest: children cut out of their parent, siblings apart
        starts, ends = [], []
        _grow(rng, starts, ends, 0, 1000, 4)
        perm = rng.permutation(len(starts))  # any input order
        s, e = np.array(starts)[perm], np.array(ends)[perm]
        q_lo = rng.integers(-10, 1010, size=50)
        q_hi = q_lo + rng.integers(0, 30, size=50)
        got = iv.innermost(iv.nesting(s, e), q_lo, q_hi)
        assert got.tolist() == _brute_innermost(s.tolist(), e.tolist(), q_lo, q_hi)


@pytest.mark.parametrize("seed", range(5))
def test_holds_matches_the_definition(seed):
    """A point is held when some range of positive length has start <= point <= end (both
    ends included; the union drops empty ranges), checked range by range against the
    union's answer; negative points (no time) never."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 1000, 30)
    ends = starts + rng.integers(0, 60, 30)
    points = np.concatenate([rng.integers(-5, 1100, 400), starts, ends, [-1]])
    want = [p >= 0 and any(s <= p <= e for s, e in zip(starts, ends) if e > s) for p in points]
    assert iv.holds(iv.union(starts, ends), points).tolist() == want
    assert iv.holds(iv.union([], []), points).tolist() == [False] * len(points)


@pytest.mark.parametrize("seed", range(5))
def test_covered_each_matches_a_grid(seed):
    """Each range's covered length is the count of grid points both it and the set hold;
    a set with nothing covers nothing, an empty or reversed range has nothing covered."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 900, 40)
    a = iv.union(s, s + rng.integers(0, 50, 40))
    q_lo = np.concatenate([rng.integers(-20, 1000, 300), a[0], a[1]])
    q_hi = q_lo + rng.integers(-5, 120, len(q_lo))
    grid = cover(a, 1200)
    want = [int(grid[max(lo, 0):max(hi, 0)].sum()) if hi > lo else 0 for lo, hi in zip(q_lo, q_hi)]
    assert iv.covered_each(a, q_lo, q_hi).tolist() == want
    assert iv.covered_each(iv.union([], []), q_lo, q_hi).tolist() == [0] * len(q_lo)
    # covered before t: the grid's covered points below t
    t = rng.integers(-10, 1100, 100)
    assert iv.covered_before(a, t).tolist() == [int(grid[:max(x, 0)].sum()) for x in t]


@pytest.mark.parametrize("seed", range(5))
def test_nest_order_sorts_by_start_then_longer_first(seed):
    """By start; of equal starts the later end first; of equal ranges, input order kept
    (checked pairwise along the order, with many ties, sorted and shuffled inputs)."""
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 60, 400))
    ends = starts + rng.integers(0, 5, 400)
    for s, e in ((starts, ends), (starts[::-1], ends[::-1]), (starts[p := rng.permutation(400)], ends[p])):
        order = iv.nest_order(s, e)
        assert sorted(order.tolist()) == list(range(400))
        for a, b in zip(order[:-1], order[1:]):
            assert (s[a], -e[a], a) < (s[b], -e[b], b)
    assert iv.nest_order([], []).tolist() == []


@pytest.mark.parametrize("seed", range(5))
def test_previous_reaching_is_the_nearest_earlier_value_as_high(seed):
    """By definition, position by position, on random values with ties, on values that
    climb (each answer -1) and on blocks that fall while their base climbs (which take the
    stack walk after too many rounds)."""
    rng = np.random.default_rng(seed)
    cases = [rng.integers(0, 20, 300), rng.integers(0, 3, 300), np.arange(300),
             np.arange(300)[::-1], np.tile(np.arange(250)[::-1], 2) + np.repeat([0, 1], 250),
             np.array([], dtype=np.int64)]
    for hi in cases:
        want = [max((j for j in range(i) if hi[j] >= hi[i]), default=-1) for i in range(len(hi))]
        assert iv.previous_reaching(hi).tolist() == want


@pytest.mark.parametrize("rounds", [iv.JUMP_ROUNDS, 1])  # 1: the stack walk
@pytest.mark.parametrize("seed", range(5))
def test_previous_open_is_the_nearest_earlier_range_ending_after_a_start(seed, rounds, monkeypatch):
    """By definition, range by range, for ranges in start order (ties, zero-length ones,
    ranges ending where another starts), nested or not; the walk gives the same."""
    monkeypatch.setattr(iv, "JUMP_ROUNDS", rounds)
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.integers(0, 100, 300))
    ends = starts + rng.integers(0, 12, 300)
    want = [max((j for j in range(i) if ends[j] > starts[i]), default=-1) for i in range(300)]
    assert iv.previous_open(starts, ends).tolist() == want
    assert iv.previous_open([], []).tolist() == []
    hi = rng.integers(0, 20, 300)
    want = [max((j for j in range(i) if hi[j] >= hi[i]), default=-1) for i in range(300)]
    assert iv.previous_reaching(hi).tolist() == want


@pytest.mark.parametrize("seed", range(6))
def test_parent_by_depth_is_the_nearest_earlier_position_a_level_up(seed):
    """By definition, position by position, on depths that rise by at most one and fall by
    any amount (deep and shallow, long runs of siblings), and on the depths of random
    ranges in start order (the count of earlier ranges still open at each start)."""
    rng = np.random.default_rng(seed)
    walks = []
    for n, fall in ((400, 3), (400, 30), (50, 1), (1, 1), (0, 1)):
        depth = [0]
        for _ in range(n - 1):
            depth.append(depth[-1] + 1 if rng.random() < 0.45 else
                         max(0, depth[-1] - int(rng.integers(0, fall + 1))))
        walks.append(np.array(depth[:n], dtype=np.int64))
    starts = np.sort(rng.integers(0, 200, 300))
    ends = starts + rng.integers(1, 40, 300)
    walks.append(np.array([sum(ends[j] > starts[i] for j in range(i)) for i in range(300)]))
    for depth in walks:
        want = [max((j for j in range(i) if depth[j] == depth[i] - 1), default=-1)
                for i in range(len(depth))]
        assert iv.parent_by_depth(depth).tolist() == want


@pytest.mark.parametrize("seed", range(5))
def test_count_at_most_is_a_search_of_the_sorted_values(seed):
    rng = np.random.default_rng(seed)
    for n, m in ((300, 200), (0, 5), (5, 0), (1, 1)):
        values = rng.integers(0, 50, n)
        points = np.sort(rng.integers(-5, 55, m))
        want = np.searchsorted(np.sort(values), points, side="right")
        assert iv.count_at_most(values, points).tolist() == want.tolist()
