"""ingest.add_gpu_spans against its definition, by loops over random events: each step's
first GPU start and last GPU end (-1 without GPU work), the bounds passing through float64
where some step has none (the pandas map and fillna it replaces gave them so)."""

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.trace.ingest import add_gpu_spans

EPOCH_NS = 1_700_000_000_123_456_789


def _case(rng, n: int, n_steps: int):
    kinds = rng.choice(S.KINDS, n)
    ev = pd.DataFrame({
        S.KIND: pd.Categorical(kinds, categories=S.KINDS),
        S.STEP: rng.integers(-1, n_steps + 2, n),  # steps past the table's too
        S.TS_NS: EPOCH_NS + rng.integers(0, 10**9, n),
        S.DUR_NS: rng.integers(0, 10**6, n)})
    steps = pd.DataFrame({S.STEP: np.arange(n_steps, dtype=np.int64),
                          S.TS_NS: EPOCH_NS + np.arange(n_steps, dtype=np.int64) * 1000,
                          S.DUR_NS: np.full(n_steps, 1000, dtype=np.int64)})
    return ev, steps


def _expected(ev: pd.DataFrame, steps: pd.DataFrame) -> tuple[list, list]:
    bounds = {}
    for kind, step, ts, dur in zip(ev[S.KIND].astype(str), ev[S.STEP], ev[S.TS_NS], ev[S.DUR_NS]):
        if kind in S.GPU_KINDS and step >= 0:
            lo, hi = bounds.get(step, (ts, ts + dur))
            bounds[step] = (min(lo, ts), max(hi, ts + dur))
    starts = [bounds[s][0] if s in bounds else -1 for s in steps[S.STEP]]
    ends = [bounds[s][1] if s in bounds else -1 for s in steps[S.STEP]]
    if any(s not in bounds for s in steps[S.STEP]):
        starts, ends = ([int(float(v)) for v in starts], [int(float(v)) for v in ends])
    return starts, ends


def test_gpu_spans_as_defined():
    rng = np.random.default_rng(11)
    rounded = 0
    for trial in range(120):
        ev, steps = _case(rng, int(rng.integers(0, 80)), int(rng.integers(0, 6)))
        out = add_gpu_spans(steps, ev)
        assert list(out.columns) == list(S.STEP_COLUMNS)
        assert out[S.GPU_START_NS].dtype == np.int64 and out[S.GPU_END_NS].dtype == np.int64
        starts, ends = _expected(ev, steps)
        assert out[S.GPU_START_NS].tolist() == starts, trial
        assert out[S.GPU_END_NS].tolist() == ends, trial
        if -1 in starts and len(set(starts)) > 1:  # bounds rounded to float64's 256 ns
            rounded += 1
            assert all(v % 256 == 0 for v in starts + ends if v > 0)
    assert rounded > 10
