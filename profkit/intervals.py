"""Interval algebra over half-open [start, end) int64 ns intervals, shared by every analyzer.

An interval set is a pair of sorted, non-overlapping int64 arrays (starts, ends), as
returned by :func:`union`. All functions are vectorised.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]


def union(starts, ends) -> Intervals:
    """Merge possibly overlapping intervals into a sorted disjoint set."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new_group = np.empty(len(starts), dtype=bool)
    new_group[0] = True
    new_group[1:] = starts[1:] > reach[:-1]
    group = np.cumsum(new_group) - 1
    out_starts = starts[new_group]
    out_ends = np.full(len(out_starts), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(out_ends, group, ends)
    return out_starts, out_ends


def total(iv: Intervals) -> int:
    """Covered length, ns."""
    return int((iv[1] - iv[0]).sum())


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint sets: a sweep where both sets cover a point."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])),
                            np.ones(len(b[0])), -np.ones(len(b[1]))]).astype(np.int8)
    order = np.lexsort((delta, points))  # at equal points, ends (-1) before starts
    points, depth = points[order], np.cumsum(delta[order])
    both = np.flatnonzero(depth[:-1] == 2)
    starts, ends = points[both], points[both + 1]
    keep = ends > starts
    return starts[keep], ends[keep]


def complement(iv: Intervals, lo: int, hi: int) -> Intervals:
    """Gaps of a disjoint set inside [lo, hi)."""
    starts = np.concatenate([[lo], iv[1]])
    ends = np.concatenate([iv[0], [hi]])
    starts = np.clip(starts, lo, hi)
    ends = np.clip(ends, lo, hi)
    keep = ends > starts
    return starts[keep].astype(np.int64), ends[keep].astype(np.int64)


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b``."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    lo = int(min(a[0][0], b[0][0]))
    hi = int(max(a[1][-1], b[1][-1]))
    return intersect(a, complement(b, lo, hi))


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    starts = np.clip(iv[0], lo, hi)
    ends = np.clip(iv[1], lo, hi)
    keep = ends > starts
    return starts[keep], ends[keep]


def covered_before(iv: Intervals, t) -> np.ndarray:
    """Per time ``t``: the covered length of the disjoint set before it, ns."""
    starts, ends = iv
    t = np.asarray(t, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    lengths = ends - starts
    before = np.concatenate([[0], np.cumsum(lengths)])
    k = np.searchsorted(starts, t, side="right") - 1
    at = np.maximum(k, 0)
    inside = np.where(k >= 0, np.clip(t - starts[at], 0, lengths[at]), 0)
    return before[at] * (k >= 0) + inside


def covered_each(iv: Intervals, starts, ends) -> np.ndarray:
    """Per range [start, end): its length covered by the disjoint set, ns (0 for an empty
    or reversed range); ``total(intersect(range, iv))`` of each, in one pass."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
    return covered_before(iv, ends) - covered_before(iv, starts)


def holds(iv: Intervals, points) -> np.ndarray:
    """Per point: whether one of the intervals holds it (its start to its end, both
    included); a negative point (no time) is held by none."""
    points = np.asarray(points, dtype=np.int64)
    starts, ends = iv
    if not len(starts):
        return np.zeros(len(points), bool)
    at = np.searchsorted(starts, points, side="right") - 1
    return (at >= 0) & (points <= ends[np.maximum(at, 0)]) & (points >= 0)


def count_at_most(values, points) -> np.ndarray:
    """Per point of ``points`` (sorted), how many ``values`` are at most it:
    ``np.searchsorted(np.sort(values), points, side="right")``, by one stable merge of the
    two sorted lists (~2x quicker than a binary search per point)."""
    ordered = np.sort(np.asarray(values, dtype=np.int64))
    merged = np.argsort(np.concatenate([ordered, np.asarray(points, dtype=np.int64)]),
                        kind="stable")  # at a tie the values come first: counted
    is_point = merged >= len(ordered)
    return np.cumsum(~is_point)[is_point]


def union_of(*sets: Intervals) -> Intervals:
    """Union of several interval sets."""
    return union(np.concatenate([s[0] for s in sets]), np.concatenate([s[1] for s in sets]))


# --- ranges that nest (the CPU ranges of one thread) ----------------------------------------

Nesting = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def nest_order(starts, ends) -> np.ndarray:
    """The order of ranges by start and, of ranges starting together, the longer first (a
    parent before its children), ties kept in input order: ``np.lexsort((-ends, starts))``.
    A stable sort by start alone (quick on a table already in time order), then only the
    runs of equal starts sorted by end."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    first = starts[order]
    tie = first[1:] == first[:-1]
    if tie.any():
        in_run = np.zeros(len(order), dtype=bool)
        in_run[1:] = tie
        in_run[:-1] |= tie
        run = np.flatnonzero(in_run)
        order[run] = order[run][np.lexsort((-ends[order[run]], first[run]))]
    return order


def nesting(starts, ends) -> Nesting:
    """Ranges of one thread, which nest: (start, end, parent, index), sorted by start and,
    of ranges starting together, the longer first; ``parent``: the position of the range
    holding each (-1 for none); ``index``: each one's position in the input."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = nest_order(starts, ends)
    lo, hi = starts[order], ends[order]
    return lo, hi, previous_reaching(hi), order


JUMP_ROUNDS = 200  # pointer jumping takes a few dozen rounds on real threads


def previous_reaching(hi: np.ndarray) -> np.ndarray:
    """For each position, the nearest earlier one whose value is at least its own (-1 for
    none): of ranges in :func:`nest_order`, by their ends, the one holding each."""
    hi = np.asarray(hi, dtype=np.int64)
    return _nearest_earlier(hi, hi, strict=False)


def previous_open(starts, ends) -> np.ndarray:
    """For ranges in start order: the nearest earlier one still open at each one's start
    (ending after it), -1 for none; of ranges that nest, the one holding each."""
    return _nearest_earlier(np.asarray(ends, dtype=np.int64), np.asarray(starts, dtype=np.int64),
                            strict=True)


def parent_by_depth(depth) -> np.ndarray:
    """For each position, the nearest earlier one a level up (``depth`` one less; -1 for
    none), where the depth never rises by more than one from a position to the next (ranges
    in start order, each one's depth the count still open at its start). A position whose
    depth rose has the one before it; any other the same as the last one at its level before
    it (between them every depth is higher): per level, the latest rise carried forward, by
    one running maximum over the positions sorted by level."""
    depth = np.asarray(depth, dtype=np.int64)
    n = len(depth)
    small = depth.astype(np.int16) if n and depth.max() < 1 << 15 else depth
    pos = np.argsort(small, kind="stable")  # by level, then position (a radix sort)
    level = depth[pos]
    rose = np.zeros(n, dtype=bool)
    rose[1:] = depth[1:] == depth[:-1] + 1
    latest = np.maximum.accumulate(np.where(rose[pos], level * n + pos - 1, -1)) \
        if n else level
    out = np.empty(n, dtype=np.int64)
    out[pos] = np.where(level > 0, latest - level * n, -1)
    return out


def _nearest_earlier(values: np.ndarray, limits: np.ndarray, strict: bool) -> np.ndarray:
    """Per position i, the nearest j < i with ``values[j] > limits[i]`` (``strict``) or
    ``>=``, -1 for none, where a candidate that fails a position fails every later one its
    own earlier failures do (:func:`previous_reaching`: values below a value below its own;
    :func:`previous_open`: the limits never fall). Found by pointer jumping: each position's
    candidate only ever moves to its candidate's candidate, everything passed failing, a
    round per step for every position at once; past :data:`JUMP_ROUNDS` rounds (contrived
    orders), a walk with a stack of the positions not yet passed."""
    def passes(value, limit):
        return value > limit if strict else value >= limit

    cand = np.arange(-1, len(values) - 1, dtype=np.int64)
    todo = np.arange(1, len(values), dtype=np.int64)
    for _ in range(JUMP_ROUNDS):
        todo = todo[~passes(values[cand[todo]], limits[todo])]
        cand[todo] = cand[cand[todo]]
        todo = todo[cand[todo] >= 0]
        if not len(todo):
            return cand
    out = np.full(len(values), -1, dtype=np.int64)
    stack: list[int] = []
    value, limit = values.tolist(), limits.tolist()
    for i, lim in enumerate(limit):
        while stack and not passes(value[stack[-1]], lim):
            stack.pop()
        out[i] = stack[-1] if stack else -1
        stack.append(i)
    return out


def innermost(tree: Nesting, starts, ends) -> np.ndarray:
    """For each query [start, end], the input position of the innermost range of ``tree``
    (:func:`nesting`) holding it (the latest-starting one, for ranges that nest); -1 when
    none does. An instant is a query whose start and end are equal."""
    lo, hi, parent, order = tree
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    k = np.searchsorted(lo, starts, side="right") - 1
    climbing = np.flatnonzero(k >= 0)
    while len(climbing):  # from the latest start to the first range reaching the query's end
        climbing = climbing[hi[k[climbing]] < ends[climbing]]
        k[climbing] = parent[k[climbing]]
        climbing = climbing[k[climbing] >= 0]
    return np.where(k >= 0, order[np.maximum(k, 0)], -1)
