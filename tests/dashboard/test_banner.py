"""The banner of a run's pages and its Runs row: what is missing from a run is never silent.
Real runs (copies of zoo/straggler with rank 1 truncated or deleted) read by the real loader
and analyses; a made-up run record only for the failed-status wording."""

import shutil

import pytest
from profkit.dashboard import banner, loading

from tests.dashboard.conftest import BAD_TRACE, REPO, STRAGGLER, _truncate, spoiled_copy
from tests.dashboard.test_loading import text_of

COMPLETE = REPO / "samples" / "runs" / "zoo" / "compute"


def shown(path):
    value = loading.show(path)
    assert not isinstance(value, loading.RunReadError), value
    return value[1]


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
