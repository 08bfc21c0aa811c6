"""Few steps (issue 40, item 4): a step is left out only for a cause the trace shows.

samples/runs/issue40/shard_wait (1 x H200, README there): a small MLP fed by a single-process
DataLoader whose every 5th batch costs 40 ms (a new shard) and the others 5 ms; 5 steps,
the profiler records steps 2-4. The workload's own CUDA-event step times for those steps are
12.97, 12.23 and 48.14 ms: the last recorded step is the 5th batch's. Read as "last recorded
step (profiler stop)", it was left out and the run judged on two steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.steps import choose_steps

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc, sample_labels

RUN = REPO / "samples" / "runs" / "issue40" / "shard_wait"


def loader_ms_per_step() -> dict[int, float]:
    """ms inside the DataLoader's ``__next__`` annotation per ProfilerStep, from the raw
    trace."""
    (trace,) = (RUN / "traces").glob("*.json*")
    ev = [e for e in read_doc(trace)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"]
    out = {}
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        out[int(s["name"].split("#")[1])] = sum(
            e["dur"] for e in ev if "DataLoader" in e["name"] and lo <= e["ts"] < hi) / 1e3
    return out


def test_a_last_step_made_long_by_the_dataloader_is_used():
    printed = sample_labels(RUN.parent / "SUMMARY.txt")["shard_wait"]["step_ms"][2:]
    loader = loader_ms_per_step()
    assert printed[2] > 3 * max(printed[:2])  # the workload's own times: the last is long
    assert loader[4] > 35 and max(loader[2], loader[3]) < 10  # ... because of the DataLoader
    a = analysed(RUN)
    steps = a.table("step_breakdown").sort_values("step")
    assert steps["used"].tolist() == [True, True, True], steps["excluded_reason"].tolist()
    assert steps["step_ns"].iloc[2] / 1e6 == pytest.approx(printed[2], rel=0.05)
    # the verdict is over the three steps: data loading, its share the trace's
    share = sum(loader.values()) / (steps["step_ns"].sum() / 1e6)
    assert a.verdict["primary"] == "data_loading"
    assert a.verdict["fractions"]["data_loading"] == pytest.approx(share, abs=0.05)


def test_the_same_step_times_without_the_data_loading_read_as_profiler_stop():
    """The rule the run above needs: the step table alone (no parts) still leaves the last
    step out as the profiler's stop, as before; with its excess in data loading, it stays."""
    table = analysed(RUN).table("step_breakdown").sort_values("step")[
        ["step", "step_ns", "data_loading"]].reset_index(drop=True)
    used, reasons = choose_steps(table.drop(columns="data_loading"), np.zeros(3), None, 0.25)
    assert used.tolist() == [True, True, False] and "profiler stop" in reasons[2]
    used, _ = choose_steps(table, np.zeros(3), None, 0.25)
    assert used.all()


def test_a_long_first_step_or_one_without_more_data_loading_is_still_left_out():
    table = pd.DataFrame({"step": [1, 2, 3, 4, 5], "step_ns": [40, 10, 10, 11, 40],
                          "data_loading": [32, 2, 2, 2, 3]})
    used, reasons = choose_steps(table, np.zeros(5), None, 0.25)
    assert used.tolist() == [False, True, True, True, False]
    assert "start-up" in reasons[0] and "profiler stop" in reasons[4]
