"""The report's run-status line: a failed or incomplete run says so, and names the ranks,
in the first lines of the text and Markdown reports."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report import render

REPO = Path(__file__).resolve().parents[2]
BALANCED = REPO / "samples" / "runs" / "zoo" / "balanced"  # a 2-rank profkit run, both ok


@pytest.fixture(scope="module")
def ok_analysis():
    return analyze_run(BALANCED, workers=1, cache=False)


def with_run(analysis, **run):
    return dataclasses.replace(analysis, run={**analysis.run, **run})


def test_an_ok_run_has_no_status_line(ok_analysis):
    assert ok_analysis.run["status"] == "ok" and ok_analysis.run["rank_errors"] == {}
    lines = render.to_text(ok_analysis).splitlines()
    assert lines[0] == f"profkit analysis of {BALANCED}"
    # the layout line (a DDP pair, docs/parallelism.md) sits with the ranks, before the verdict
    assert lines[1:4] == ["2 of 2 ranks analysed", "parallel layout: 2 ranks: dp 2", ""]
    assert lines[4].startswith("VERDICT:")
    assert "Run status" not in render.to_markdown(ok_analysis)
    # stock traces without run.json have no status at all
    assert render.status_line({"status": None}) is None


def test_a_failed_run_names_its_ranks_first(ok_analysis):
    a = with_run(ok_analysis, status="failed", rank_errors={
        "12": "signal.SIGTERM: terminated by SIGTERM (15)", "3": "RuntimeError: boom",
        "4": "ValueError: " + "v" * 400, "7": "RuntimeError: other"})
    line = ("RUN STATUS: failed (rank 3: RuntimeError: boom; rank 4: ValueError: "
            + "v" * 145 + "...; rank 7: RuntimeError: other; 1 more rank)")
    text = render.to_text(a).splitlines()  # the line wraps at the terminal's width
    assert " ".join(ln.strip() for ln in text[1:text.index("2 of 2 ranks analysed")]) == line
    md = render.to_markdown(a).splitlines()
    assert md[2] == "- **Run status:** " + line.removeprefix("RUN STATUS: ")


def test_an_incomplete_run_without_reasons(ok_analysis):
    a = with_run(ok_analysis, status="incomplete", rank_errors={})
    assert render.to_text(a).splitlines()[1] == "RUN STATUS: incomplete"


def test_profkit_analyze_of_a_run_with_a_failed_rank_says_why(tmp_path):
    """Offline, after the job: the reason comes from the rank's own status file."""
    run = shutil.copytree(BALANCED, tmp_path / "run")
    path = run / "ranks" / "rank1.json"
    status = json.loads(path.read_text())
    status.update(status="failed", error={"type": "torch.OutOfMemoryError",
                                          "message": "CUDA out of memory.\nTried to allocate"})
    path.write_text(json.dumps(status))
    a = analyze_run(run, workers=1, cache=False)
    assert a.run["status"] == "failed" and a.run["ranks_analyzed"] == [0, 1]
    assert a.run["rank_errors"] == {
        "1": "torch.OutOfMemoryError: CUDA out of memory.\nTried to allocate"}
    assert render.to_text(a).splitlines()[1] == (
        "RUN STATUS: failed (rank 1: torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate)")
