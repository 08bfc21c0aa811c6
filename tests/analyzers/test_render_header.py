"""The truth about the run first, in every format: ranks analysed of the world size, skipped
files with their reasons and the notes come before the verdict, and ``problems`` says what
``--strict`` fails on."""

from __future__ import annotations

import shutil

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report import header as H
from profkit.analyzers.report.render import to_json, to_markdown, to_text

from profkit.run.loader import MERGED_OUTPUT
from tests.conftest import REPO

PUBLIC = REPO / "tests" / "data" / "public"
DLRM = PUBLIC / "param_dlrm_8rank"  # 8 ranks, world size 8 in every trace's distributedInfo


@pytest.fixture(scope="module")
def one_of_eight(tmp_path_factory):
    run = tmp_path_factory.mktemp("one") / "run"
    run.mkdir()
    [rank0] = DLRM.glob("worker0_*.json.gz")
    shutil.copy(rank0, run / rank0.name)
    return analyze_run(run, workers=1, cache=False)


def test_seven_missing_ranks_are_said_first(one_of_eight):
    text = to_text(one_of_eight).splitlines()
    assert text[1] == "1 of 8 ranks analysed: 7 missing (1-7)"
    assert text.index(text[1]) < min(i for i, ln in enumerate(text)
                                     if ln.startswith(("BIGGEST WIN", "VERDICT")))
    md = to_markdown(one_of_eight).splitlines()
    assert md[2] == "- 1 of 8 ranks analysed: 7 missing (1-7)"
    run = to_json(one_of_eight)["run"]
    assert list(run)[:8] == ["path", "status", "world_size", "ranks_analyzed", "ranks_missing",
                             "skipped_files", "notes", "problems"]
    assert run["ranks_missing"] == [1, 2, 3, 4, 5, 6, 7]
    assert run["problems"] == ["7 of 8 ranks missing (1-7)"]


def test_skipped_files_and_notes_come_before_the_verdict(tmp_path):
    run = shutil.copytree(PUBLIC / "resnet50_nw0", tmp_path / "run")  # with LICENSE, SOURCE.md
    (run / "worker1.1623143089862.pt.trace.json").write_text('{"traceEvents": [')
    a = analyze_run(run, workers=1, cache=False)
    text = to_text(a).splitlines()
    verdict = next(i for i, ln in enumerate(text) if ln.startswith(("BIGGEST WIN", "VERDICT")))
    head = " ".join(" ".join(text[:verdict]).split())  # lines wrap at the terminal's width
    assert f"skipped: {run / 'worker1.1623143089862.pt.trace.json'}: truncated JSON" in head
    assert "note: " in head and head.endswith("by file order")
    assert not any(ln.startswith(("skipped:", "note:")) for ln in text[verdict:])
    # LICENSE and SOURCE.md cannot be traces: not a line about them, every time
    assert "LICENSE" not in head and "SOURCE.md" not in head
    # the truncated trace and the guessed rank count
    assert H.problems(a.run) == [
        f"1 trace file skipped (first: {run / 'worker1.1623143089862.pt.trace.json'})",
        "1 rank numbered by file order, not by the trace"]


def test_ranks_left_out_on_purpose_are_not_missing():
    a = analyze_run(DLRM, workers=1, ranks=[0, 1])
    assert H.ranks_line(a.run) == "2 of 8 ranks analysed (ranks 0-1 asked for)"
    assert H.missing_ranks(a.run) == [] and to_json(a)["run"]["ranks_missing"] == []
    assert not any("missing" in p for p in H.problems(a.run))


def _run(**kw):
    base = {"path": "r", "status": None, "world_size": 2, "ranks_analyzed": [0, 1],
            "skipped_files": [], "notes": []}
    return {**base, **kw}


@pytest.mark.parametrize("path, reason, counts", [
    ("r/README.md", "not a trace file (expected .json or .json.gz)", False),
    ("r/merged.json.gz", MERGED_OUTPUT, False),
    ("r/copy.json", "the same file as r/rank0.json, read once", False),
    ("r/capture-1-20261122T101010", "on-demand capture 1: a run of its own", False),
    ("r/rank1.json", "truncated JSON", True),
    ("r/rank1.json.gz", "from another run (run id b, this run is a)", True),
    ("r/sub", "cannot list this folder: Permission denied", True),
    # sidecars of a profkit run: never a rank's trace, whatever their name
    ("r/ranks/rank0.json", "unreadable rank status (unexpected character)", False),
    ("r/nvml/rank1.0.npz", "NVML chunk skipped: no ts_ns column", False),
    ("r/nccl/flight_recorder_rank0.pkl", "truncated pickle", False),
])
def test_which_skipped_files_count_against_strict(path, reason, counts):
    run = _run(skipped_files=[{"path": path, "reason": reason}])
    assert bool(H.problems(run)) is counts


@pytest.mark.parametrize("status, counts", [
    ("ok", False), (None, False), ("failed", True), ("incomplete", True), ("running", True)])
def test_a_run_that_did_not_end_well_counts(status, counts):
    assert bool(H.problems(_run(status=status))) is counts


def test_notes_other_than_guessed_ranks_do_not_count():
    notes = ["ranks 0-1: 19 profiler cycles read as steps 2-58",
             "rank 0: steps from ProfilerStep#: 4 of 5 used (551-554); left out: 550 (first)"]
    assert H.problems(_run(notes=notes)) == []


def test_many_skipped_files_are_counted_not_listed():
    skipped = [{"path": f"r/f{i}.txt", "reason": "not a trace file"} for i in range(25)]
    lines = H.skipped_lines(_run(skipped_files=skipped))
    assert len(lines) == H.MAX_SKIPPED_SHOWN + 1
    assert lines[-1] == f"... and {25 - H.MAX_SKIPPED_SHOWN} more (all in --format json)"


def test_html_report_is_one_self_contained_page(tmp_path):
    """--format html: the verdict, findings with their savings and the cited tables, the run's
    truth first, and no external URL, script or stylesheet link."""
    import re

    from profkit.cli import main

    out = tmp_path / "report.html"
    assert main(["analyze", str(REPO / "samples" / "runs" / "zoo" / "straggler"), "--no-cache",
                 "--format", "html", "-o", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "2 of 2 ranks analysed" in page and "rank 1 is a straggler" in page
    assert "could save ~1.47 ms/step (14%)" in page
    assert "Top kernels" in page and "Collectives" in page
    assert not re.search(r"https?://|<script|<link|src=", page)
