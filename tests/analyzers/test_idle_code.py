"""Labels of the code the GPU waits for (analyzers/measure/idle_code.py), on hand-made ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.idle_code import (
    UNRECORDED,
    _ancestors,
    _innermost,
    _Ranges,
    _touching,
    _walk,
)

from profkit import intervals as iv
from profkit import schema as S


def _host(rows):
    """Ranges (name, kind, start_ns, end_ns) of one thread as the events table has them."""
    names, kinds, starts, ends = zip(*rows)
    return pd.DataFrame({S.TS_NS: np.array(starts, np.int64),
                         S.DUR_NS: np.array(ends, np.int64) - np.array(starts, np.int64),
                         S.NAME: pd.Categorical(names), S.KIND: pd.Categorical(kinds, categories=S.KINDS)})


def attribute(host: pd.DataFrame, idle) -> dict[str, int]:
    return _Ranges(host, idle).attribute(idle)


def _idle(*spans):
    return (np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64))


def test_the_nearest_user_frame_names_the_innermost_range():
    """train.py's frame is the nearest user code above the sync (the torch frame between
    them is library code); the idle instants inside aten::item but outside the sync are
    aten::item's, under the same frame."""
    host = _host([("train.py(10): step", S.KIND_PYTHON, 0, 100),
                  ("site-packages/torch/nn/module.py(5): __call__", S.KIND_PYTHON, 0, 90),
                  ("aten::linear", S.KIND_CPU_OP, 10, 80),
                  ("aten::item", S.KIND_CPU_OP, 20, 30),
                  ("cudaStreamSynchronize", S.KIND_RUNTIME, 22, 28)])
    got = attribute(host, _idle((21, 29), (95, 105)))
    assert got == {"train.py(10): step -> cudaStreamSynchronize": 6,
                   "train.py(10): step -> aten::item": 2,
                   "train.py(10): step": 5,  # 95-100: the frame itself (no user frame above)
                   UNRECORDED: 5}  # 100-105: nothing recorded


def test_without_stacks_the_outermost_op_names_it():
    """No Python frames: the outermost op above is the prefix, unless it is the range itself
    or has its name; a lone op is its own label."""
    host = _host([("aten::linear", S.KIND_CPU_OP, 0, 50),
                  ("aten::addmm", S.KIND_CPU_OP, 5, 40),
                  ("aten::item", S.KIND_CPU_OP, 10, 20),
                  ("aten::mm", S.KIND_CPU_OP, 60, 70),
                  ("aten::mm", S.KIND_CPU_OP, 62, 66),
                  ("cudaLaunchKernel", S.KIND_RUNTIME, 80, 90)])
    got = attribute(host, _idle((12, 14), (45, 46), (61, 64), (85, 86)))
    assert got == {"aten::linear -> aten::item": 2,
                   "aten::linear": 1,  # 45-46: inside only aten::linear
                   "aten::mm": 3,  # 61-62 the outer mm, 62-64 the inner one (same name)
                   "cudaLaunchKernel": 1}


def test_a_long_name_is_cut_to_80_characters():
    long = "x" * 100
    host = _host([(long, S.KIND_ANNOTATION, 0, 10), ("aten::copy_", S.KIND_CPU_OP, 2, 8)])
    got = attribute(host, _idle((3, 4)))
    assert got == {"x" * 77 + "... -> aten::copy_": 1}


def _nest(rng, starts, ends, lo, hi, depth):
    """A range [lo, hi) and inside it up to two children apart (touching or empty ones
    too), ``depth`` levels down."""
    starts.append(lo)
    ends.append(hi)
    if depth and hi - lo >= 4:
        cut = np.sort(rng.choice(np.arange(lo, hi + 1), size=4, replace=False))
        for a, b in ((cut[0], cut[1]), (cut[2], cut[3])):
            if rng.random() < 0.8:
                _nest(rng, starts, ends, int(a), int(b), depth - 1)


@pytest.mark.parametrize("seed", range(4))
def test_ranges_split_as_the_walk_and_the_definition_split_them(seed):
    """Each instant's owner is the latest range (start order, longer first) holding it:
    where ranges nest, the innermost (checked on a grid), and the parents and each owner's
    time are the stack walk's, for ranges that nest and ranges that cross."""
    rng = np.random.default_rng(seed)
    for trial in range(150):
        starts, ends = [], []
        _nest(rng, starts, ends, 0, 200, 5)
        if trial % 2:  # a few ranges across the others
            extra = rng.integers(0, 200, 4)
            starts, ends = starts + extra.tolist(), ends + (extra + rng.integers(0, 40, 4)).tolist()
        s, e = np.array(starts, np.int64), np.array(ends, np.int64)
        order = iv.nest_order(s, e)
        s, e = s[order], e[order]
        got, want = _innermost(s, e), _walk(s, e)
        assert got[3].tolist() == want[3].tolist()
        grids = []
        for a, b, owner, _ in (got, want):
            grid = np.full(250, -1)
            for lo, hi, o in zip(a, b, owner):
                assert (grid[lo:hi] == -1).all()  # segments apart
                grid[lo:hi] = o
            grids.append(grid.tolist())
        latest = [max((i for i in range(len(s)) if s[i] <= t < e[i]), default=-1)
                  for t in range(250)]
        assert grids[0] == grids[1] == latest


@pytest.mark.parametrize("seed", range(4))
def test_ancestors_are_the_nearest_user_frame_and_the_outermost_op_above(seed):
    """By walking up each range's parents: random forests and a long chain."""
    rng = np.random.default_rng(seed)
    for n in (0, 1, 7, 40, 300):
        parent = np.array([rng.integers(-1, i) if i and rng.random() < 0.9 else -1
                           for i in range(n)], dtype=np.int64)
        for parents in (parent, np.arange(-1, n - 1, dtype=np.int64)):
            is_user, is_op = rng.random(n) < 0.3, rng.random(n) < 0.5
            user_above, outer_above = _ancestors(is_user, is_op, parents)
            for i in range(n):
                chain, p = [], parents[i]
                while p >= 0:
                    chain.append(p)
                    p = parents[p]
                assert user_above[i] == next((a for a in chain if is_user[a]), -1)
                assert outer_above[i] == next((a for a in reversed(chain) if is_op[a]), -1)


@pytest.mark.parametrize("seed", range(5))
def test_touching_segments_are_those_overlapping_the_idle_set(seed):
    """_touching against the definition (a segment overlaps an idle interval: it ends after
    the interval starts and starts before it ends), on disjoint sorted segments, touching
    ones among them, and idle sets before, between and after them."""
    rng = np.random.default_rng(seed)
    cuts = np.unique(rng.integers(0, 1000, 120))
    seg_start, seg_end = cuts[:-1], cuts[1:]
    held = rng.random(len(seg_start)) < 0.7  # gaps between some segments
    seg_start, seg_end = seg_start[held], seg_end[held]
    a = rng.integers(-50, 1050, 40)
    idle = iv.union(a, a + rng.integers(0, 30, 40))
    want = [j for j in range(len(seg_start))
            if any(seg_end[j] > s and seg_start[j] < e for s, e in zip(*idle))]
    assert _touching(seg_start, seg_end, idle).tolist() == want
    assert _touching(seg_start, seg_end, iv.union([], [])).tolist() == []


def test_names_no_range_uses_change_no_label():
    """The names table holds every event's name (library and user frames among them that no
    range here uses): the labels are those of the names the ranges use; a frame without a
    name reads the last name of the table, whether a range uses it or not."""
    rows = [("train.py(10): step", S.KIND_PYTHON, 0, 100),
            ("site-packages/torch/nn/module.py(5): __call__", S.KIND_PYTHON, 0, 90),
            (None, S.KIND_PYTHON, 15, 35), ("aten::item", S.KIND_CPU_OP, 20, 30)]
    idle = _idle((21, 29))
    used = ["train.py(10): step", "site-packages/torch/nn/module.py(5): __call__", "aten::item"]

    def labels(categories):
        host = _host(rows).assign(**{S.NAME: pd.Categorical([r[0] for r in rows],
                                                            categories=categories)})
        return attribute(host, idle)

    library = ["/lib/python3/x.py(1): f", *used[:1], "/lib/python3/y.py(2): g", *used[1:],
               "/lib/python3/z.py(3): h"]
    assert labels(library) == {"train.py(10): step -> aten::item": 8}
    # the unnamed frame is user code when the last name is: the nearest, it has no name
    assert labels([*library, "train.py(2): g"]) == {"aten::item": 8}
