"""kernels.self_times (each CPU range's duration minus its direct children's, per thread)
against a stack walk over random nested ranges of several threads."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.kernels import self_times

from profkit import schema as S


def _nested(rng, lo: int, hi: int, depth: int, out: list) -> None:
    """Random ranges nested inside [lo, hi): siblings apart or touching, some as long as
    their parent (the same start), some zero-length."""
    at = lo
    while at < hi and depth < 6 and rng.random() < 0.85:
        start = int(rng.integers(at, hi))
        end = int(rng.integers(start, hi + 1)) if rng.random() < 0.9 else start
        if at == lo and rng.random() < 0.2:
            start, end = lo, hi  # a first child as long as its parent
        out.append((start, end))
        if end > start:
            _nested(rng, start, end, depth + 1, out)
        at = max(end, start + 1)


def _walked(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Self time by a stack walk: ranges by start, longer first, then input order."""
    out = np.zeros(len(starts), dtype=np.int64)
    child = np.zeros(len(starts), dtype=np.int64)
    stack: list[int] = []
    order = sorted((i for i in range(len(starts)) if ends[i] > starts[i]),
                   key=lambda i: (starts[i], -ends[i], i))
    for i in order:
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        if stack:
            child[stack[-1]] += ends[i] - starts[i]
        stack.append(i)
    for i in order:
        out[i] = max(ends[i] - starts[i] - child[i], 0)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_self_times_are_a_stack_walk_per_thread(seed):
    rng = np.random.default_rng(seed)
    rows = []
    for pid, tid in ((1, 1), (1, 2), (2, 1), (7, 10**12)):
        ranges: list = []
        _nested(rng, 0, 10_000, 0, ranges)
        rows += [(pid, tid, s, e) for s, e in ranges]
    rows = [rows[i] for i in rng.permutation(len(rows))]  # threads interleaved
    pid, tid, starts, ends = (np.array(c, dtype=np.int64) for c in zip(*rows))
    frame = pd.DataFrame({S.PID: pid, S.TID: tid, S.TS_NS: starts, S.DUR_NS: ends - starts})
    want = np.zeros(len(rows), dtype=np.int64)
    for thread in set(zip(pid.tolist(), tid.tolist())):
        mine = np.flatnonzero((pid == thread[0]) & (tid == thread[1]))
        want[mine] = _walked(starts[mine], ends[mine])
    assert (want > 0).sum() > 10 and (want < ends - starts).sum() > 5  # children taken
    assert self_times(frame).tolist() == want.tolist()


def test_op_totals_are_the_cpu_ops_grouped_by_name():
    """op_totals (grouped on name codes, by numpy) against pandas' grouping of the names
    as text, on a bundled run: count, self and inclusive time per CPU op name."""
    from profkit.analyzers.measure.kernels import CPU_NEST_KINDS, NEST_COLUMNS, op_totals

    from profkit.run.loader import load_run
    from tests.realruns import RUNS
    rank = load_run(RUNS / "stock_ddp").ranks[0]
    cpu = rank.of_kinds(CPU_NEST_KINDS, NEST_COLUMNS)
    ops = pd.DataFrame({"name": cpu[S.NAME].astype(str), "self_ns": self_times(cpu),
                        "total_ns": cpu[S.DUR_NS]})[(cpu[S.KIND] == S.KIND_CPU_OP).to_numpy()]
    want = ops.groupby("name").agg(count=("self_ns", "size"), self_ns=("self_ns", "sum"),
                                   total_ns=("total_ns", "sum"))
    got = op_totals(rank)
    assert got.columns.tolist() == ["count", "self_ns", "total_ns", "name"] and len(got) > 20
    assert [str(got[c].dtype) for c in ("count", "self_ns", "total_ns")] == ["int64"] * 3
    got = got.set_index("name").sort_index()
    assert got.index.tolist() == want.index.tolist()
    assert got.values.tolist() == want.values.tolist()


def test_used_step_ops_are_the_used_steps_ops_grouped_by_name():
    """used_step_work's ops table against pandas' grouping of the names as text: CPU ops and
    annotations (ProfilerStep aside) of the used steps, self time among the CPU ranges and
    the optimizer's annotations, on a bundled run."""
    from profkit.analyzers.measure.breakdown import rank_steps
    from profkit.analyzers.measure.stepwork import used_step_work

    from profkit.run.loader import load_run
    from tests.realruns import RUNS
    rank = load_run(RUNS / "stock_ddp").ranks[0]
    steps = rank_steps(rank)
    used = steps.loc[steps["used"].astype(bool), S.STEP].tolist()
    ev = rank.events
    kind, name = ev[S.KIND].astype(str), ev[S.NAME].astype(str)
    nest = ev[(kind.isin(["cpu_op", "runtime", "driver", "sync"])
               | ((kind == "annotation") & name.str.startswith("Optimizer."))).to_numpy()]
    own = self_times(nest)
    keep = (nest[S.KIND].astype(str).isin(["cpu_op", "annotation"])
            & ~nest[S.NAME].astype(str).str.startswith("ProfilerStep#")
            & nest[S.STEP].isin(used)).to_numpy()
    ops = pd.DataFrame({"name": nest[S.NAME].astype(str)[keep], "self_ns": own[keep],
                        "total_ns": nest[S.DUR_NS][keep]})
    want = ops.groupby("name").agg(count=("self_ns", "size"), self_ns=("self_ns", "sum"),
                                   total_ns=("total_ns", "sum"))
    got = used_step_work(rank, steps)["used_step_ops"].set_index("name").sort_index()
    assert len(used) > 1 and len(got) > 20 and (got["rank"] == rank.rank).all()
    assert got.index.tolist() == want.index.tolist()
    assert got[["count", "self_ns", "total_ns"]].values.tolist() == want.values.tolist()


def test_compute_subclasses_are_the_compute_kernels_grouped_by_subclass():
    """breakdown.compute_subclasses (by sub-class codes) against pandas' grouping of the
    sub-classes as text, on a bundled run: kernel ns, count and share, category order."""
    from profkit.analyzers.measure.breakdown import compute_subclasses

    from profkit.run.loader import load_run
    from tests.realruns import RUNS
    rank = load_run(RUNS / "stock_ddp").ranks[0]
    ev = rank.events
    comp = ev[(ev[S.CLASS].astype(str) == "compute").to_numpy() & (ev[S.STEP] >= 0).to_numpy()]
    want = comp.groupby(comp[S.SUBCLASS].astype(str))[S.DUR_NS].agg(["sum", "count"])
    got = compute_subclasses(rank)
    order = [c for c in ev[S.SUBCLASS].cat.categories if c in want.index]
    assert got[S.SUBCLASS].astype(str).tolist() == order and len(order) > 2
    assert got["kernel_ns"].tolist() == want.loc[order, "sum"].tolist()
    assert got["kernels"].tolist() == want.loc[order, "count"].tolist()
    assert got["share"].tolist() == (want.loc[order, "sum"] / want["sum"].sum()).tolist()
    assert got[S.SUBCLASS].dtype == ev[S.SUBCLASS].dtype and (got["rank"] == rank.rank).all()
