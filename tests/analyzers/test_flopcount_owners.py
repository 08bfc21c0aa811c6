"""flopcount.kernel_owners (each kernel's op: the one running on the launching thread when
its launch call was made) against the definition, on random ops, calls and kernels of
three threads (calls sharing a correlation, calls outside every op, kernels without a
call)."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.flopcount import kernel_owners

from profkit import schema as S
from profkit.model import RankData, empty_frame


@pytest.mark.parametrize("seed", range(6))
def test_each_kernel_is_owned_by_the_op_running_its_launch_call(seed):
    rng = np.random.default_rng(seed)
    threads = [(1, 1), (1, 2), (5, 1)]
    ops = []
    for pid, tid in threads:  # outermost ops of a thread: distinct starts, apart
        starts = np.sort(rng.choice(np.arange(0, 2000, 20), 40, replace=False))
        for s in starts:
            ops.append((pid, tid, int(s), int(s + rng.integers(0, 30))))
    ops = [ops[i] for i in rng.permutation(len(ops))]
    op_frame = pd.DataFrame(ops, columns=[S.PID, S.TID, S.TS_NS, "end"])
    n = 300
    thread = rng.integers(0, len(threads), n)
    calls = pd.DataFrame({
        S.KIND: pd.Categorical(rng.choice([S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_CPU_OP], n),
                               categories=S.KINDS),
        S.CORRELATION: rng.integers(-1, 200, n), S.TS_NS: rng.integers(-5, 2020, n),
        S.PID: [threads[t][0] for t in thread], S.TID: [threads[t][1] for t in thread]})
    rd = RankData(0, "", calls, empty_frame(S.COLLECTIVE_COLUMNS), empty_frame(S.STEP_COLUMNS))
    kernels = pd.DataFrame({S.CORRELATION: rng.integers(-1, 230, 150)})
    want = []
    launch = calls[calls[S.KIND].isin([S.KIND_RUNTIME, S.KIND_DRIVER])
                   & (calls[S.CORRELATION] >= 0)]
    for corr in kernels[S.CORRELATION]:
        mine = launch[launch[S.CORRELATION] == corr]
        if not len(mine):
            want.append(-1)
            continue
        call = mine.iloc[0]  # the first call of the correlation
        before = [i for i, (p, t, s, _) in enumerate(ops)
                  if (p, t) == (call[S.PID], call[S.TID]) and s <= call[S.TS_NS]]
        last = max(before, key=lambda i: ops[i][2], default=None)
        want.append(last if last is not None and call[S.TS_NS] <= ops[last][3] else -1)
    got = kernel_owners(rd, op_frame, kernels)
    assert got.tolist() == want
    assert sum(w >= 0 for w in want) > 5 and sum(w < 0 for w in want) > 5


@pytest.mark.parametrize("seed", range(5))
def test_outer_ops_are_those_no_earlier_op_of_their_thread_contains(seed):
    """flopcount.outer_ops against the definition: CPU ops with FLOPs in the steps, by
    thread, start and the longer first (ties in row order), each kept when it ends after
    every earlier op of its thread; ties of start and length, nested and crossing ops."""
    from profkit.analyzers.measure.flopcount import outer_ops
    rng = np.random.default_rng(seed)
    n = 400
    events = pd.DataFrame({
        S.KIND: pd.Categorical(rng.choice([S.KIND_CPU_OP, S.KIND_CPU_OP, S.KIND_RUNTIME], n),
                               categories=S.KINDS),
        S.PID: rng.choice([1, 2], n), S.TID: rng.choice([1, 7], n),
        S.TS_NS: rng.integers(0, 300, n), S.DUR_NS: rng.integers(0, 40, n),
        S.STEP: rng.integers(-1, 3, n), S.FLOPS: rng.choice([0.0, 1e9, 2e9, np.nan], n),
        S.FLOPS_DTYPE: pd.Categorical(rng.choice(["", "bf16"], n))})
    steps = pd.DataFrame({S.STEP: [0, 1, 2]})
    rd = RankData(0, "", events, empty_frame(S.COLLECTIVE_COLUMNS), steps)
    rows = [(p, t, s, -d, i) for i, (k, p, t, s, d, st, f) in enumerate(zip(
        events[S.KIND], events[S.PID], events[S.TID], events[S.TS_NS], events[S.DUR_NS],
        events[S.STEP], events[S.FLOPS])) if k == S.KIND_CPU_OP and f > 0 and st >= 0]
    want, reach = [], {}
    for p, t, s, neg, i in sorted(rows):
        if s - neg > reach.get((p, t), -1):
            want.append(i)
        reach[(p, t)] = max(reach.get((p, t), -1), s - neg)
    got = outer_ops(rd)
    assert got[[S.PID, S.TID, S.TS_NS, S.DUR_NS, S.STEP, S.FLOPS]].values.tolist() == \
        events.loc[want, [S.PID, S.TID, S.TS_NS, S.DUR_NS, S.STEP, S.FLOPS]].values.tolist()
    assert (got["end"] == got[S.TS_NS] + got[S.DUR_NS]).all() and len(want) > 20
    assert got.index.tolist() == list(range(len(want)))
