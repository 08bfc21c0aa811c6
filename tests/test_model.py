"""RankData's shared kind selections (profkit.model.RankData.of_kinds), on a bundled run."""

import numpy as np
import pytest

from profkit import schema as S
from profkit.run.loader import load_run
from tests.realruns import RUNS


@pytest.fixture(scope="module")
def rank():
    return load_run(RUNS / "stock_ddp").ranks[0]


KIND_SETS = [S.GPU_KINDS, (S.KIND_KERNEL,), (S.KIND_RUNTIME, S.KIND_DRIVER), ("absent",)]


@pytest.mark.parametrize("kinds", KIND_SETS)
def test_of_kinds_is_the_rows_of_those_kinds(rank, kinds):
    want = rank.events[rank.events[S.KIND].astype(str).isin(kinds).to_numpy()]
    assert rank.of_kinds(kinds).equals(want)
    with rank.sharing_selections():
        assert rank.of_kinds(kinds).equals(want)
        assert rank.of_kinds(kinds).equals(want)  # the shared one, again


@pytest.mark.parametrize("seed", range(4))
def test_selections_taken_from_wider_ones_are_the_rows_of_their_kinds(rank, seed):
    """In any order of asking, with some columns or all: a selection whose kinds are among
    an earlier one's (kernels after the GPU events, its columns copied from theirs) holds
    the rows and values of its kinds, as the events give them."""
    rng = np.random.default_rng(seed)
    asks = [(S.GPU_KINDS, None), ((S.KIND_KERNEL,), None), ((S.KIND_KERNEL,), (S.NAME, S.STEP)),
            ((S.KIND_KERNEL, S.KIND_MEMCPY), (S.TS_NS, S.CLASS)), (S.GPU_KINDS, (S.TS_NS,)),
            ((S.KIND_CPU_OP, S.KIND_RUNTIME), (S.NAME, S.TID)), ((S.KIND_RUNTIME,), (S.TID,))]
    ev = rank.events
    with rank.sharing_selections():
        for i in rng.permutation(len(asks)):
            kinds, columns = asks[i]
            rows = ev[S.KIND].isin(kinds).to_numpy()
            want = ev[rows] if columns is None else ev.loc[rows, list(columns)]
            got = rank.of_kinds(kinds, columns)
            assert len(got) and got.equals(want) and got.index.equals(want.index)
            assert all(got[c].dtype == want[c].dtype for c in got.columns)


def test_a_selection_is_shared_only_inside_the_block(rank):
    def same_data(a, b):
        return np.shares_memory(a[S.TS_NS].to_numpy(), b[S.TS_NS].to_numpy())

    assert not same_data(rank.of_kinds(S.GPU_KINDS), rank.of_kinds(S.GPU_KINDS))
    with rank.sharing_selections():
        first = rank.of_kinds(S.GPU_KINDS)
        first["mine"] = 1  # a caller's own column stays the caller's
        again = rank.of_kinds(S.GPU_KINDS)
        assert same_data(first, again) and "mine" not in again.columns
        with rank.sharing_selections():  # nested: still the outer block's selection
            assert same_data(rank.of_kinds(S.GPU_KINDS), first)
        assert same_data(rank.of_kinds(S.GPU_KINDS), first)
    assert not same_data(rank.of_kinds(S.GPU_KINDS), first)


def test_after_the_block_a_selection_sees_changed_events(rank):
    with rank.sharing_selections():
        before = rank.of_kinds((S.KIND_KERNEL,))
    saved = rank.events
    try:
        rank.events = saved.assign(**{S.DUR_NS: saved[S.DUR_NS] + 1})
        after = rank.of_kinds((S.KIND_KERNEL,))
        assert (after[S.DUR_NS].to_numpy() == before[S.DUR_NS].to_numpy() + 1).all()
    finally:
        rank.events = saved


def test_a_run_its_ranks_and_a_diff_print_as_one_line():
    """repr() of a loaded run, a rank and a diff: one short line each, not their tables."""
    from profkit.analyzers.compare.diff import diff_analyses
    from profkit.analyzers.executor import analyze_run

    from profkit.run.loader import load_run
    from tests.conftest import REPO

    path = REPO / "samples" / "runs" / "stock_ddp"
    run = load_run(path)
    assert repr(run) == f"<Run {path}: 2 of 2 rank(s) [0, 1]>"
    assert repr(run.ranks[0]).startswith("<RankData rank 0: ") and "3 step(s)" in repr(run.ranks[0])
    a = analyze_run(path, workers=1)
    d = diff_analyses(a, a)
    assert "\n" not in repr(d) and len(repr(d)) < 400
    assert repr(d).startswith(f"<Diff {path} -> {path}: unchanged")


@pytest.mark.parametrize("kinds", KIND_SETS)
def test_of_kinds_with_columns_is_those_columns_of_the_rows(rank, kinds):
    columns = [S.NAME, S.TS_NS, S.KIND]
    want = rank.events[rank.events[S.KIND].astype(str).isin(kinds).to_numpy()][columns]
    assert rank.of_kinds(kinds, columns).equals(want)
    with rank.sharing_selections():
        assert rank.of_kinds(kinds, columns).equals(want)
        assert rank.of_kinds(kinds).equals(rank.events.loc[want.index])  # then every column
        assert rank.of_kinds(kinds, columns[:1]).equals(want[columns[:1]])


def test_a_change_to_a_shared_column_stays_the_callers(rank):
    with rank.sharing_selections():
        first = rank.of_kinds(S.GPU_KINDS, [S.DUR_NS])
        want = first[S.DUR_NS].to_numpy().copy()
        first.loc[first.index[0], S.DUR_NS] = -7  # copy-on-write: first's own copy
        again = rank.of_kinds(S.GPU_KINDS)
        assert again[S.DUR_NS].to_numpy().tolist() == want.tolist()


def test_a_derived_table_is_computed_once_inside_the_block(rank):
    """Outside the block every call computes; inside, once per (function, arguments), and
    each caller's frames are its own (a column one adds is not seen by the next)."""
    calls = []

    def steps_of_kind(data, kind):
        calls.append(kind)
        return data.of_kinds((kind,), [S.STEP]), len(calls)

    assert rank.derived(steps_of_kind, S.KIND_KERNEL)[1] == 1
    assert rank.derived(steps_of_kind, S.KIND_KERNEL)[1] == 2
    with rank.sharing_selections():
        first, n = rank.derived(steps_of_kind, S.KIND_KERNEL)
        first["mine"] = 1
        again, m = rank.derived(steps_of_kind, S.KIND_KERNEL)
        assert n == m == 3 and "mine" not in again.columns
        assert rank.derived(steps_of_kind, S.KIND_RUNTIME)[1] == 4
    assert calls == [S.KIND_KERNEL] * 3 + [S.KIND_RUNTIME]
