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
