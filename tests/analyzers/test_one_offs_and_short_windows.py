"""One-offs and degenerate windows (issue 40, item 2), on real H200 traces without steps
(samples/runs/issue40, README there).

- warmup_gap: the profiler is on from ``model.cuda()``: the first call of each op sets up its
  library and loads its kernels (the first ``aten::linear`` 146.9 ms where its median is
  0.1 ms). Those first calls are one-offs: named as such and left out of the window, not
  billed "per step" as launch overhead.
- one_copy: the trace's only GPU event is one HtoD copy under 1 us: too short to judge,
  no verdict (it was "host sync bound: 100%", critical).
"""

from __future__ import annotations

import collections
import statistics

import pytest

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc

ISSUE = REPO / "samples" / "runs" / "issue40"


def first_calls_ms(run: str) -> dict[str, tuple[float, float]]:
    """{op: (its longest call, its median call)} in ms, for ops called more than once, from
    the raw trace."""
    (trace,) = (ISSUE / run).glob("*.json*")  # not the result cache an analysis left there
    calls = collections.defaultdict(list)
    for e in read_doc(trace)["traceEvents"]:
        if e.get("cat") == "cpu_op":
            calls[e["name"]].append(e["dur"] / 1e3)
    return {n: (max(v), statistics.median(v)) for n, v in calls.items() if len(v) > 1}


def test_first_call_set_up_in_a_stepless_window_is_a_one_off():
    calls = first_calls_ms("warmup_gap")
    longest, median = calls["aten::linear"]
    assert longest > 100 and longest > 1000 * median  # once 147 ms, usually 0.1 ms
    a = analysed(ISSUE / "warmup_gap")
    one_offs = a.table("one_off_calls").set_index("name")
    assert one_offs.loc["aten::linear", "dur_ns"] / 1e6 == pytest.approx(longest, abs=0.01)
    notes = " ".join(a.run["notes"])
    assert "one aten::linear call took 146.9 ms" in notes and "one-off" in notes
    # the window the verdict reads is the rest: the cut first calls are not in it
    window_ms = a.table("step_breakdown")["step_ns"].sum() / 1e6
    (trace,) = (ISSUE / "warmup_gap").glob("*.json*")
    gpu = [e for e in read_doc(trace)["traceEvents"]
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    lo_us, hi_us = min(e["ts"] for e in gpu), max(e["ts"] + e["dur"] for e in gpu)
    first = max((e for e in read_doc(trace)["traceEvents"] if e.get("name") == "aten::linear"),
                key=lambda e: e["dur"])
    assert lo_us < first["ts"] and first["ts"] + first["dur"] < hi_us  # inside the GPU window
    assert window_ms <= (hi_us - lo_us) / 1e3 - longest + 0.01  # ... and cut out of it
    # no finding bills the 147 ms first linear as a per-step saving
    assert all((f.estimated_saving or {}).get("ms_per_step", 0) < longest for f in a.findings)


def test_a_window_of_one_tiny_copy_gets_no_verdict():
    (trace,) = (ISSUE / "one_copy").glob("*.json*")
    gpu = [e for e in read_doc(trace)["traceEvents"]
           if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(gpu) == 1 and gpu[0]["dur"] < 3  # one copy, under 3 us
    a = analysed(ISSUE / "one_copy")
    assert a.verdict["primary"] is None and "too short" in a.verdict["summary"]
    assert not any(f.severity == "critical" for f in a.findings)
    (short,) = [f for f in a.findings if f.category == "trace"]
    assert "1 GPU event(s)" in short.message and "too short to judge" in short.message
