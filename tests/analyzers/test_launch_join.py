"""kernels._launch_join (each GPU op's launch call, enqueue time and launch delay) against
the definition, on random launch calls and GPU ops: calls repeating a correlation, graph
launches, GPU ops sharing a correlation (graph replays) and ops without a call."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.kernels import _launch_join

from profkit import schema as S
from profkit.model import RankData, empty_frame

NAMES = ["cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaEventRecord"]


@pytest.mark.parametrize("seed", range(6))
def test_each_gpu_op_takes_its_first_launch_call(seed):
    rng = np.random.default_rng(seed)
    n_calls, n_ops = 200, 260
    calls = pd.DataFrame({
        S.KIND: rng.choice([S.KIND_RUNTIME, S.KIND_DRIVER], n_calls),
        S.NAME: rng.choice(NAMES, n_calls), S.CORRELATION: rng.integers(-1, 150, n_calls),
        S.TS_NS: rng.integers(0, 10_000, n_calls), S.DUR_NS: rng.integers(0, 50, n_calls),
        S.STEP: rng.integers(-1, 3, n_calls), S.STREAM: -1})
    ops = pd.DataFrame({
        S.KIND: rng.choice([S.KIND_KERNEL, S.KIND_MEMCPY], n_ops),
        S.NAME: "k", S.CORRELATION: rng.integers(-1, 180, n_ops),
        S.TS_NS: rng.integers(0, 10_100, n_ops), S.DUR_NS: rng.integers(1, 40, n_ops),
        S.STEP: rng.integers(-1, 3, n_ops), S.STREAM: rng.choice([7, 9], n_ops)})
    events = pd.concat([calls, ops], ignore_index=True).iloc[rng.permutation(n_calls + n_ops)]
    events = events.reset_index(drop=True).astype({S.KIND: pd.CategoricalDtype(S.KINDS),
                                                   S.NAME: "category"})
    rd = RankData(0, "", events, empty_frame(S.COLLECTIVE_COLUMNS), empty_frame(S.STEP_COLUMNS))
    launches, enq, delays = _launch_join(rd)

    gpu = events[events[S.KIND].isin(S.GPU_KINDS)]
    host = events[events[S.KIND].isin([S.KIND_RUNTIME, S.KIND_DRIVER])]
    made = set(gpu[S.CORRELATION][gpu[S.CORRELATION] >= 0])
    is_launch = [("aunch" in n or "emcpy" in n) or (c >= 0 and c in made)
                 for n, c in zip(host[S.NAME].astype(str), host[S.CORRELATION])]
    assert launches.index.tolist() == host.index[is_launch].tolist()
    first = {}
    for name, corr, ts, dur in zip(launches[S.NAME].astype(str), launches[S.CORRELATION],
                                   launches[S.TS_NS], launches[S.DUR_NS]):
        if corr >= 0 and corr not in first:
            first[corr] = (name, ts, ts + dur)
    want_enq, want_delays = [], []
    joined = [c for c in gpu[S.CORRELATION] if c in first]
    for corr, ts, step in zip(gpu[S.CORRELATION], gpu[S.TS_NS], gpu[S.STEP]):
        call = first.get(corr)
        want_enq.append(min(call[1], ts) if call else ts)
        if call and call[0] != "cudaGraphLaunch" and joined.count(corr) == 1:
            want_delays.append((ts, step, ts - call[2]))
    assert enq.index.tolist() == gpu.index.tolist()
    assert enq["enq"].tolist() == want_enq
    assert enq["end"].tolist() == (gpu[S.TS_NS] + gpu[S.DUR_NS]).tolist()
    assert enq[S.STREAM].tolist() == gpu[S.STREAM].tolist()
    assert list(delays.itertuples(index=False, name=None)) == want_delays
    assert len(want_delays) > 10 and len(joined) > len(want_delays)
