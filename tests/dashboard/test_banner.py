"""The banner of a run's pages and its Runs row: what is missing from a run is never silent.
Real runs (copies of zoo/straggler with rank 1 truncated or deleted) read by the real loader
and analyses; a made-up run record only for the failed-status wording."""

import shutil

import pytest
from profkit.dashboard.server import loading
from profkit.dashboard.ui import banner

from tests.dashboard.conftest import (
    BAD_CHUNK,
    BAD_STATUS,
    BAD_TRACE,
    REPO,
    STRAGGLER,
    _truncate,
    bad_sidecars,
    spoiled_copy,
)
from tests.dashboard.test_loading import text_of

COMPLETE = REPO / "samples" / "runs" / "zoo" / "compute"


def shown(path):
    value = loading.show(path)
    assert not isinstance(value, loading.RunReadError), value
    return value


def test_a_truncated_rank_is_named_in_the_banner_and_the_runs_row(tmp_path):
    info = shown(spoiled_copy(tmp_path / "run", _truncate)).analysis.run
    text = text_of(banner.run_banner(info))
    assert "1 of 2 ranks analysed: 1 missing (1)" in text
    assert f"{BAD_TRACE}:" in text  # relative to the run folder, with its reason
    assert "1 file(s) skipped" in text and banner.PARTIAL in text
    assert banner.level(info) == banner.PROBLEM
    assert (banner.ranks_text(info), banner.status_text(info)) == ("1 of 2", "incomplete")


def test_a_missing_trace_is_not_silent(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(STRAGGLER, run, ignore=shutil.ignore_patterns(".profkit"))
    (run / BAD_TRACE).unlink()
    a = shown(run).analysis
    text = text_of(banner.run_banner(a.run))
    assert "1 of 2 ranks analysed: 1 missing (1)" in text and "skipped" not in text
    assert (banner.ranks_text(a.run), banner.status_text(a.run)) == ("1 of 2", "incomplete")
    assert "1 of 2 ranks missing (1)" in banner.problems_title(a.run)


def test_a_complete_run_has_no_banner_and_its_gpu_counted_once():
    s = shown(COMPLETE)
    assert banner.run_banner(s.analysis.run) is None
    assert (banner.ranks_text(s.analysis.run), banner.status_text(s.analysis.run)) == ("1", None)
    # run.json lists both GPUs of the host; its one rank ran on one
    assert s.facts["gpus"] == "1 x NVIDIA H200"


def test_bad_sidecars_of_a_whole_run_are_notes_not_incomplete(tmp_path):
    """Both ranks analysed: a rank status file and an NVML chunk that could not be used
    are listed (on the Runs row as notes, in the banner), the run is not incomplete."""
    info = shown(bad_sidecars(tmp_path / "run")).analysis.run
    assert (banner.ranks_text(info), banner.status_text(info)) == ("2", None)
    assert banner.level(info) == banner.INFO
    assert banner.notes_text(info) == "2 files skipped"
    title = banner.notes_title(info)
    assert f"{BAD_STATUS}: unreadable rank status" in title
    assert f"{BAD_CHUNK}: NVML chunk skipped" in title
    assert "1 file(s) skipped" not in text_of(banner.run_banner(info))
    assert "2 file(s) skipped" in text_of(banner.run_banner(info))


def test_only_missing_ranks_or_a_bad_end_make_a_run_incomplete():
    whole = {"status": "ok", "world_size": 2, "ranks_analyzed": [0, 1], "notes": [
        "rank 1: rank numbered by file order"],
        "skipped_files": [{"path": "r/b.json", "reason": "from another run"}]}
    assert banner.status_text(whole) is None  # --strict still fails it: a note says why
    assert banner.notes_text(whole) == "1 file skipped, 1 rank numbered by file order"
    steps = {**whole, "skipped_files": [], "notes": ["rank 0: steps from ProfilerStep#: 2 of 3 used"]}
    assert banner.notes_text(steps) is None  # how steps were chosen: the banner says it
    assert banner.status_text({**whole, "ranks_analyzed": [0]}) == "incomplete"
    assert banner.status_text({**whole, "status": "running"}) == "running"
    assert banner.notes_text({"status": "ok", "world_size": 1, "ranks_analyzed": [0]}) is None


@pytest.mark.parametrize("status", ["failed", "running"])
def test_a_run_that_did_not_end_well_says_so_first(status):
    info = {"status": status, "world_size": 2, "ranks_analyzed": [0, 1],
            "rank_errors": {"1": "RuntimeError: CUDA out of memory"}}
    div = banner.run_banner(info)
    assert text_of(div.children[0]) == f"Run {status} (rank 1: RuntimeError: CUDA out of memory)"
    assert banner.status_text(info) == status and banner.ranks_text(info) == "2"


def test_notes_alone_make_an_informative_banner():
    info = {"status": "ok", "world_size": 1, "ranks_analyzed": [0],
            "notes": ["rank 0: no ProfilerStep ranges; the whole trace is one step"]}
    assert banner.level(info) == banner.INFO and banner.status_text(info) is None
    assert "no ProfilerStep ranges" in text_of(banner.run_banner(info))
