"""Host-side tables of a rank against their definitions, row by row in plain Python, on
random events: charge.host_ranges (each thread's sync, DataLoader and launching time),
hostwork._heads (each step's head before its first GPU work), charge.next_launches (the
launch call ending each GPU-idle gap) and allocator.rank_allocator_calls (allocator calls
per step)."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.charge import HOST_KINDS, SYNC_CALLS, host_ranges

from profkit import intervals as iv
from profkit import schema as S

NAMES = ["cudaStreamSynchronize", "aten::item", "_MultiProcessingDataLoaderIter.__next__",
         "aten::mm", "aten::add", "cudaLaunchKernel", "ProfilerStep#3"]


def _frame(rng, n: int, kinds) -> pd.DataFrame:
    return pd.DataFrame({S.KIND: pd.Categorical(rng.choice(kinds, n), categories=S.KINDS),
                         S.NAME: pd.Categorical(rng.choice(NAMES, n), categories=NAMES),
                         S.TID: rng.choice([4, 9, 11], n), S.TS_NS: rng.integers(0, 5000, n),
                         S.DUR_NS: rng.integers(0, 80, n), S.EXTERNAL_ID: rng.integers(-1, 60, n)})


def _union(rows) -> dict:
    out: dict = {}
    for tid, ts, dur in rows:
        out.setdefault(tid, []).append((ts, ts + dur))
    return {t: iv.union([a for a, _ in r], [b for _, b in r]) for t, r in out.items()}


@pytest.mark.parametrize("seed", range(5))
def test_host_ranges_are_each_threads_unions(seed):
    rng = np.random.default_rng(seed)
    ev = _frame(rng, 600, [S.KIND_CPU_OP, S.KIND_RUNTIME, S.KIND_PYTHON, S.KIND_KERNEL])
    blocked = _frame(rng, 20, [S.KIND_RUNTIME])
    launch = _frame(rng, 80, [S.KIND_RUNTIME])
    got = host_ranges(ev, blocked, launch)
    rows = list(zip(ev[S.KIND].astype(str), ev[S.NAME].astype(str), ev[S.TID], ev[S.TS_NS],
                    ev[S.DUR_NS], ev[S.EXTERNAL_ID]))
    launched = set(launch[S.EXTERNAL_ID])

    def plain(frame):
        return [(t, s, d) for t, s, d in zip(frame[S.TID], frame[S.TS_NS], frame[S.DUR_NS])]

    want = {
        "sync": _union([(t, s, d) for k, n, t, s, d, _ in rows if k in HOST_KINDS
                        and n in SYNC_CALLS] + plain(blocked)),
        "loader": _union([(t, s, d) for k, n, t, s, d, _ in rows if k in HOST_KINDS
                          and "DataLoader" in n]),
        "launching": _union(plain(launch) + [(t, s, d) for k, _, t, s, d, e in rows
                                             if k == S.KIND_CPU_OP and e >= 0 and e in launched]),
    }
    for part in want:
        assert sorted(got[part]) == sorted(want[part]) and len(want[part]) == 3
        for tid in want[part]:
            assert [a.tolist() for a in got[part][tid]] == [a.tolist() for a in want[part][tid]]


@pytest.mark.parametrize("seed", range(5))
def test_step_heads_run_to_the_first_call_that_put_work_on_the_gpu(seed):
    """hostwork._heads against the definition: per step, [its start, the first launch call
    at or after it whose correlation a GPU op has, capped at the next step's start); the
    heads whose call made a host-to-device copy apart."""
    from profkit.analyzers.measure.hostwork import _heads
    rng = np.random.default_rng(seed)
    n = 120
    events = pd.DataFrame({
        S.KIND: pd.Categorical(rng.choice([S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_CPU_OP], n),
                               categories=S.KINDS),
        S.TS_NS: rng.choice(np.arange(0, 10_000, 7), n, replace=False),  # distinct
        S.CORRELATION: rng.integers(-1, 90, n)})
    gpu_corr = rng.choice(np.arange(0, 90), 50, replace=False)
    gpu = pd.DataFrame({S.CORRELATION: gpu_corr,
                        S.SUBCLASS: pd.Categorical(rng.choice(["HtoD", "gemm"], 50))})
    steps = pd.DataFrame({S.TS_NS: np.sort(rng.choice(np.arange(0, 10_000, 5), 8, replace=False))})
    heads, inputs = _heads(events, gpu, steps)
    copy = set(gpu[S.CORRELATION][gpu[S.SUBCLASS] == "HtoD"])
    calls = sorted((t, c) for k, t, c in zip(events[S.KIND], events[S.TS_NS], events[S.CORRELATION])
                   if k in (S.KIND_RUNTIME, S.KIND_DRIVER) and c >= 0 and c in set(gpu_corr))
    starts = steps[S.TS_NS].tolist()
    want_all, want_copy = [], []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else np.iinfo(np.int64).max
        first = next(((t, c) for t, c in calls if t >= s), None)
        end = min(first[0], nxt) if first else s
        want_all.append((s, end))
        if first and first[1] in copy:
            want_copy.append((s, end))
    for got, want in ((heads, want_all), (inputs, want_copy)):
        want = iv.union([a for a, _ in want], [b for _, b in want])
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
    assert iv.total(heads) > 0 and iv.total(inputs) > 0


@pytest.mark.parametrize("seed", range(5))
def test_each_gap_takes_the_launch_call_of_the_op_that_ends_it(seed):
    """charge.next_launches against the definition: per GPU-idle gap, the first GPU op
    starting at or after its end, that op's first launch call (start, end, thread); a gap
    without a next op, or whose op has no call, keeps its end on the main launching thread."""
    from profkit.analyzers.measure.charge import main_launch_thread, next_launches
    rng = np.random.default_rng(seed)
    n = 150
    launch = pd.DataFrame({S.CORRELATION: rng.integers(0, 120, n), S.TID: rng.choice([3, 5], n),
                           S.TS_NS: rng.integers(0, 9000, n), S.DUR_NS: rng.integers(0, 30, n)})
    gpu = pd.DataFrame({S.TS_NS: rng.choice(np.arange(0, 10_000, 3), 90, replace=False),
                        S.CORRELATION: rng.integers(-1, 150, 90)})
    ends = np.sort(rng.choice(np.arange(0, 10_500, 7), 40, replace=False))
    gaps = (ends - 5, ends)
    start, end, tid = next_launches(launch, gpu, gaps)
    main = main_launch_thread(launch)
    ops = sorted(zip(gpu[S.TS_NS], gpu[S.CORRELATION]))
    hits = 0
    for i, e in enumerate(ends.tolist()):
        op = next(((t, c) for t, c in ops if t >= e), None)
        calls = launch[launch[S.CORRELATION] == op[1]] if op else launch.iloc[:0]
        if len(calls):
            call = calls.iloc[0]
            want = (call[S.TS_NS], call[S.TS_NS] + call[S.DUR_NS], call[S.TID])
            hits += 1
        else:
            want = (e, e, main)
        assert (start[i], end[i], tid[i]) == want
    assert hits > 5


@pytest.mark.parametrize("seed", range(4))
def test_allocator_calls_are_counted_and_summed_per_step(seed):
    """allocator.rank_allocator_calls' malloc and free counts and ns per step against a
    plain count over random runtime calls (steps without calls: 0; calls outside steps and
    other calls: left out)."""
    from profkit.analyzers.measure.allocator import rank_allocator_calls

    from profkit.model import RankData, empty_frame
    rng = np.random.default_rng(seed)
    n = 300
    names = ["cudaMalloc", "cudaFree", "cudaLaunchKernel", "cuMemFree_v2"]
    events = pd.DataFrame({S.KIND: pd.Categorical(rng.choice([S.KIND_RUNTIME, S.KIND_DRIVER], n),
                                                  categories=S.KINDS),
                           S.NAME: pd.Categorical(rng.choice(names, n), categories=names),
                           S.STEP: rng.integers(-1, 5, n), S.TS_NS: rng.integers(0, 10**6, n),
                           S.DUR_NS: rng.integers(0, 10**9, n)})
    kernel = pd.DataFrame({S.KIND: pd.Categorical([S.KIND_KERNEL], categories=S.KINDS),
                           S.NAME: pd.Categorical(["cudaMalloc"], categories=names),
                           S.STEP: [2], S.TS_NS: [5], S.DUR_NS: [3]})  # a GPU op: no call
    events = pd.concat([events, kernel], ignore_index=True)
    rd = RankData(0, "", events, empty_frame(S.COLLECTIVE_COLUMNS), empty_frame(S.STEP_COLUMNS))
    steps = pd.DataFrame({S.STEP: [0, 1, 2, 3, 4, 7], "step_ns": 1, "used": True})
    got = rank_allocator_calls(rd, steps).set_index(S.STEP)
    for step in steps[S.STEP]:
        for column, kinds in (("malloc", {"cudaMalloc"}), ("free", {"cudaFree", "cuMemFree_v2"})):
            mine = events[(events[S.STEP] == step) & events[S.NAME].isin(kinds)
                          & (events[S.KIND] != S.KIND_KERNEL)]
            assert got.loc[step, f"{column}_calls"] == len(mine)
            assert got.loc[step, f"{column}_ns"] == int(mine[S.DUR_NS].sum())
    assert got.loc[7, "malloc_calls"] == 0 and got["free_calls"].dtype == np.int64


def test_allocator_calls_on_a_rank_without_gpu_work_idle_for_the_calls_themselves():
    """With no GPU work on the rank (a CPU-side trace), a step's idle inside the allocator is
    the union of its calls (nothing follows them to wait for): it used to index the empty
    GPU starts and raise."""
    from profkit.analyzers.measure.allocator import rank_allocator_calls

    from profkit.model import RankData, empty_frame
    names = ["cudaMalloc", "cudaFree"]
    events = pd.DataFrame({S.KIND: pd.Categorical([S.KIND_RUNTIME] * 3, categories=S.KINDS),
                           S.NAME: pd.Categorical(["cudaMalloc", "cudaFree", "cudaMalloc"],
                                                  categories=names),
                           S.STEP: [0, 0, 1], S.TS_NS: [100, 150, 900], S.DUR_NS: [100, 20, 7]})
    rd = RankData(0, "", events, empty_frame(S.COLLECTIVE_COLUMNS), empty_frame(S.STEP_COLUMNS))
    steps = pd.DataFrame({S.STEP: [0, 1], "step_ns": 1000, "used": True})
    got = rank_allocator_calls(rd, steps).set_index(S.STEP)
    assert got.loc[0, "idle_ns"] == 100  # [100, 200) holds [150, 170)
    assert got.loc[1, "idle_ns"] == 7
