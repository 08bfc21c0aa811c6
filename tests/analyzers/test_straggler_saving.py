"""A straggler's saving is its lateness once its own step is fixed (issue 40, item 6d).

Issue 40 saw a 2-rank job whose rank 1 sleeps 40 ms per step: the straggler finding promised
75% (the others' wait) while removing the sleep saved 52%; the straggler's own host-work
finding, 59%, was right. Where the straggler's own host is the cause, fixing it shortens its
step by its host excess over the others and no more: that is the saving, never more than the
others wait. The rule's arithmetic is checked on small findings; the real pairs
(samples/runs/pairs: straggler, straggler_sleep) stay within 0.15 of their measured fix in
tests/analyzers/test_savings.py, and their messages name their savings in
tests/analyzers/test_saving_named.py.
"""

from __future__ import annotations

import json

import pytest
from profkit.analyzers.findings.straggler_saving import straggler_saving
from profkit.analyzers.report.render import to_json
from profkit.analyzers.result import Finding

from tests.analysed import analysed
from tests.conftest import REPO

MS = 1e6
PAIRS = REPO / "samples" / "runs" / "pairs"
MESSAGE = "Rank 1 is a straggler: the other ranks lose 51.00 ms per step (75% of their 68.00 ms step)"


def finding(exposed_ms: float, raw_ms: float, excess_ms: float | None) -> Finding:
    evidence = {"others_exposed_wait_ns_per_step": exposed_ms * MS,
                "others_wait_ns_per_step": raw_ms * MS, "others_step_ns": 68.0 * MS}
    if excess_ms is not None:
        evidence["host_excess_ms_per_step"] = excess_ms
    return Finding("straggler", "critical", MESSAGE, "Investigate rank 1.", evidence, rank=1)


def test_a_host_late_straggler_saves_its_host_excess_not_the_others_whole_wait():
    f = straggler_saving(finding(exposed_ms=51.0, raw_ms=60.0, excess_ms=40.0))
    assert f.estimated_saving["ms_per_step"] == pytest.approx(40.0)
    assert f.estimated_saving["fraction"] == pytest.approx(40 / 68, abs=1e-4)
    assert "40.00 ms per step (59% of their step)" in f.message  # the saving, named


def test_the_saving_never_passes_the_others_wait():
    f = straggler_saving(finding(exposed_ms=4.6, raw_ms=4.6, excess_ms=11.3))
    assert f.estimated_saving["ms_per_step"] == pytest.approx(4.6)


def test_a_straggler_late_on_compute_saves_the_exposed_wait():
    f = straggler_saving(finding(exposed_ms=1.47, raw_ms=5.1, excess_ms=None))
    assert f.estimated_saving["ms_per_step"] == pytest.approx(1.47)
    assert f.message == MESSAGE


def test_a_real_host_late_straggler_saves_its_host_excess():
    """straggler_sleep: rank 1 sleeps 3 ms per step; the saving is its host excess (capped
    by the raw wait), which its message now names beside the others' exposed wait."""
    a = analysed(PAIRS / "straggler_sleep" / "before")
    (f,) = [f for f in a.findings if f.category == "straggler"]
    ev = f.evidence
    expected = min(ev["host_excess_ms_per_step"], ev["others_wait_ns_per_step"] / MS)
    assert f.estimated_saving["ms_per_step"] == pytest.approx(expected, abs=2e-3)
    assert f"{ev['host_excess_ms_per_step']:.2f} ms per step" in f.message


def summary_step_ms(key: str) -> float:
    for line in (PAIRS / "SUMMARY.txt").read_text().splitlines():
        if line.startswith(key + " "):
            return json.loads(line.split("PROFKIT_SAMPLE ", 1)[1])["median_step_ms"]
    raise KeyError(key)


def test_a_40ms_sleep_straggler_saves_what_removing_the_sleep_saved():
    """straggler_sleep40: rank 1 sleeps 40 ms per step inside profkit/straggler_extra; the
    balanced twin runs 47.49 -> 8.21 ms (the workload's own CUDA-event medians, SUMMARY.txt):
    83% saved. The straggler's saving is its host lateness, at most the others' wait; it and
    the rank's own host-work finding are one fix, counted once in the combined saving."""
    measured = 1 - summary_step_ms("straggler_sleep40/after") / summary_step_ms(
        "straggler_sleep40/before")
    assert measured == pytest.approx(0.827, abs=0.005)
    a = analysed(PAIRS / "straggler_sleep40" / "before")
    (f,) = [f for f in a.findings if f.category == "straggler"]
    ev = f.evidence
    assert f.rank == 1 and abs(f.estimated_saving["fraction"] - measured) < 0.05
    assert f.estimated_saving["ms_per_step"] <= ev["others_wait_ns_per_step"] / MS + 1e-3
    assert f.estimated_saving["ms_per_step"] <= ev["host_excess_ms_per_step"] + 1e-3
    assert "profkit/straggler_extra" in ev["host_code"]
    (own,) = [g for g in a.findings if g.category == "host_work" and g.rank == 1]
    assert "profkit/straggler_extra" in own.recommendation  # the sleep's range, named
    assert "DataLoader" not in own.recommendation
    combined = to_json(a)["combined_saving"]
    assert combined["sum_ms"] == pytest.approx(
        f.estimated_saving["ms_per_step"] + own.estimated_saving["ms_per_step"], abs=0.01)
    assert combined["ms_per_step"] == pytest.approx(f.estimated_saving["ms_per_step"])  # once
