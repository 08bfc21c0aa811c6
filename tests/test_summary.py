"""``profkit summary``: GPU time per kernel class per step (as the analysis gives times),
named with its unit and "per step"; counts are totals and say so."""

from __future__ import annotations

import pytest

from profkit import intervals
from profkit import schema as S
from profkit.run.loader import load_run
from profkit.run.summary import format_summary, run_summary
from profkit.textout import PIPE_WIDTH
from tests.realruns import RUNS


@pytest.fixture(scope="module")
def run():
    return load_run(RUNS / "zoo" / "straggler", cache=False)


def test_gpu_time_is_per_step_and_named_so(run):
    table = run_summary(run)
    assert {f"{c}_ms_per_step" for c in S.CLASSES} <= set(table.columns)
    assert not {f"{c}_ms" for c in S.CLASSES} & set(table.columns)
    # independently: rank 1's compute kernels, merged, over its 3 steps
    data = run.ranks[1]
    gpu = data.gpu_events[data.gpu_events[S.CLASS] == S.CLS_COMPUTE]
    busy = intervals.total(intervals.union(gpu[S.TS_NS], gpu[S.TS_NS] + gpu[S.DUR_NS]))
    row = table.set_index("rank").loc[1]
    assert row["steps"] == 3
    assert row["compute_ms_per_step"] == pytest.approx(busy / 1e6 / 3, rel=0.02)
    # the same scale as the step: a per-step time below the median step
    assert row["compute_ms_per_step"] < row["step_ms_median"]


def test_the_printed_table_says_per_step_and_totals(run):
    text = format_summary(run)
    assert "compute_ms " not in text and "memcpy" not in text
    head = " ".join(" ".join(text.splitlines()[1:4]).split())
    for words in ("ms/step", "compute", "communication", "transfer", "collectives", "events"):
        assert words in head
    flat = " ".join(text.split())
    assert "ms/step: GPU time per step" in flat and "totals over the trace" in flat
    assert max(map(len, text.splitlines())) <= PIPE_WIDTH
    assert text.splitlines()[0].endswith("world size 2, 2 ranks read")
