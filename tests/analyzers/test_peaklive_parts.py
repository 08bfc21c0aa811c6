"""peaklive._innermost (the innermost range holding each allocation instant, only the ranges
holding some instant nested) against the definition and against nesting all of a thread's
ranges, on random ranges of two threads, crossing ones among them; peaklive._by_holder
against pandas' grouping."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.peaklive import _by_holder, _innermost

from profkit import intervals as iv
from profkit import schema as S


@pytest.mark.parametrize("seed", range(6))
def test_innermost_is_the_latest_holder_in_nesting_order(seed):
    rng = np.random.default_rng(seed)
    n = 400
    starts = rng.integers(0, 2000, n)
    ends = starts + rng.integers(0, 300, n) * (rng.random(n) < 0.9)  # some zero-length
    tids = rng.choice([3, 8], n)
    names = np.array([f"op{i % 37}" for i in range(n)], dtype=object)
    ranges = pd.DataFrame({S.TID: tids, S.TS_NS: starts, S.DUR_NS: ends - starts,
                           S.NAME: pd.Categorical(names)})
    ts = np.concatenate([rng.integers(-10, 2400, 60), starts[:5], ends[:5]])  # ends held too
    tid = rng.choice([3, 8, 99], len(ts))  # thread 99: no ranges
    got = _innermost(ranges, ts, tid, "none")
    want, whole = [], []
    for q, t in zip(ts.tolist(), tid.tolist()):
        mine = np.flatnonzero(tids == t)
        holders = [i for i in mine if starts[i] <= q <= ends[i]]
        # nesting order: by start, the longer first, then input order
        best = max(holders, key=lambda i: (starts[i], -ends[i], i), default=None)
        want.append("none" if best is None else names[best])
        if len(mine):  # the innermost of all the thread's ranges, nested whole
            at = iv.innermost(iv.nesting(starts[mine], ends[mine]), [q], [q])[0]
            whole.append("none" if at < 0 else names[mine[at]])
        else:
            whole.append("none")
    assert got == want == whole
    assert sum(w != "none" for w in want) > 20


@pytest.mark.parametrize("seed", range(4))
def test_by_holder_is_the_grouping_of_pandas(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    table = pd.DataFrame({"step": 2, "op": rng.choice(["aten::mm", "aten::add", "(x)"], n),
                          "annotation": rng.choice(["", "nn.Module: A", "fwd"], n),
                          "allocated_before_step": rng.random(n) < 0.3,
                          "live_bytes": rng.integers(0, 1 << 40, n), "count": 1})
    keys = ["step", "op", "annotation", "allocated_before_step"]
    want = (table.groupby(keys, sort=False)
            .agg(live_bytes=("live_bytes", "sum"), count=("count", "sum")).reset_index())
    pd.testing.assert_frame_equal(_by_holder(table), want)
    table.loc[0, "op"] = None  # a missing key: pandas leaves the row out
    pd.testing.assert_frame_equal(_by_holder(table), table.groupby(keys, sort=False).agg(
        live_bytes=("live_bytes", "sum"), count=("count", "sum")).reset_index())
