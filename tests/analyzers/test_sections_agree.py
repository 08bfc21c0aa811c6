"""Sections that agree (issue 40, item 6): "GPU busy" counts every GPU activity the step
table counts, copies included.

samples/runs/diagnosis/transfer (1 x H200): a 1 GiB pinned HtoD copy and four small matmuls
per step; the copy is almost all of the GPU's time. GPU busy read kernels only (0.5%) while
the step table's transfer share was 98.5%.
"""

from __future__ import annotations

import pytest

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc

RUN = REPO / "samples" / "runs" / "diagnosis" / "transfer"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def busy_share() -> float:
    """Union of the GPU events inside the recorded steps over the steps' time, raw JSON."""
    (trace,) = (RUN / "traces").glob("*.json*")
    ev = [e for e in read_doc(trace)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev
             if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    spans = sorted((max(e["ts"], lo), min(e["ts"] + e["dur"], hi)) for e in ev
                   if e.get("cat") in GPU_CATS for lo, hi in steps
                   if e["ts"] < hi and e["ts"] + e["dur"] > lo)
    busy, end = 0.0, float("-inf")
    for lo, hi in spans:
        if hi > end:
            busy += hi - max(lo, end)
            end = hi
    return busy / sum(hi - lo for lo, hi in steps)


def test_gpu_busy_counts_the_copies_the_step_table_counts():
    a = analysed(RUN)
    eff = a.table("efficiency").iloc[0]
    expected = busy_share()
    assert expected > 0.9  # the copy keeps the GPU busy
    assert eff["gpu_util"] == pytest.approx(expected, abs=0.01)
    fractions = a.verdict["fractions"]
    shown = fractions["compute"] + fractions["memcpy"] + fractions["communication"]
    assert eff["gpu_util"] == pytest.approx(shown, abs=0.02)


def test_a_round_trips_saving_is_named_as_the_round_trip():
    """zoo/round_trip (H200): 50 GPU -> host -> GPU round trips per step (the workload's own
    label). The host-work finding carries the saving of the whole round trip, the blocking
    syncs included, so its words name the round trip, and the saving is no more than the two
    shares it adds."""
    a = analysed(REPO / "samples" / "runs" / "zoo" / "round_trip")
    (f,) = [f for f in a.findings if f.category == "host_work"]
    fractions = a.verdict["fractions"]
    assert "one round trip of" in f.message and "blocking syncs before it" in f.message
    assert f.estimated_saving["fraction"] > fractions["host_work"]  # more than its own share
    assert f.estimated_saving["fraction"] <= fractions["host_work"] + fractions["host_sync"] + 0.01
