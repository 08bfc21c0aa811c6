"""The run's world size comes from the evidence: run.json's when a trace agrees with it, else
the traces' own; of traces claiming different worlds, the world of the most ranks, then the
most complete one. A stranger never sets a complete run's rank aside."""

from __future__ import annotations

import json
import shutil

import pytest
from profkit.analyzers.executor import analyze_run

from profkit import cli
from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.factories import trace_doc, two_step_events, write_trace

RUN = REPO / "samples" / "runs" / "zoo" / "communication"


def read_both(path):
    """load_run and analyze_run (the map/reduce path) of ``path``: (run, analysis)."""
    return load_run(path, cache=False, workers=1), analyze_run(path, cache=False, workers=1)


def test_run_json_world_size_that_no_trace_has_yields_to_the_traces(tmp_path, capsys):
    run_dir = shutil.copytree(RUN, tmp_path / "run")
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(dict(meta, world_size=8)))
    run, analysis = read_both(run_dir)
    assert run.rank_ids == [0, 1] and run.world_size == 2 and run.skipped == []
    assert analysis.run["ranks_analyzed"] == [0, 1] and analysis.run["world_size"] == 2
    note = "run.json says world size 8, but no trace does: read as the traces' world size 2"
    assert [n for n in run.notes if note in n] and [n for n in analysis.run["notes"] if note in n]
    assert cli.main(["analyze", str(run_dir), "--no-cache", "--workers", "1"]) == 0
    assert "2 of 2 ranks analysed" in capsys.readouterr().out


def test_run_json_world_size_that_a_trace_has_still_decides(tmp_path):
    run_dir = tmp_path / "run"
    write_trace(run_dir / "rank0.json", trace_doc(0, world_size=2))
    write_trace(run_dir / "rank1.json", trace_doc(1, world_size=4, events=two_step_events(1)))
    (run_dir / "run.json").write_text(json.dumps({"schema": "profkit.run/1", "world_size": 2}))
    run = load_run(run_dir, cache=False, workers=1)
    assert run.rank_ids == [0]
    assert "world size 4, the run has 2" in run.skipped[0].reason


@pytest.mark.parametrize("rank1_names_its_world", [True, False])
def test_a_stranger_first_in_the_folder_never_displaces_a_complete_run(tmp_path, rank1_names_its_world):
    """Rank 34 of 300, first in file order, beside a 2-rank run; when rank 1 names no world
    size, one trace claims each world, and the complete run must still win."""
    run_dir = tmp_path / "run"
    stranger = write_trace(run_dir / "a-stranger.json", trace_doc(34, world_size=300))
    write_trace(run_dir / "rank0.json", trace_doc(0, world_size=2))
    rank1 = trace_doc(1, world_size=2, events=two_step_events(1))
    if not rank1_names_its_world:
        del rank1["distributedInfo"]
    write_trace(run_dir / "rank1.json", rank1)
    run, analysis = read_both(run_dir)
    assert run.rank_ids == [0, 1] and run.world_size == 2
    assert analysis.run["ranks_analyzed"] == [0, 1] and analysis.run["world_size"] == 2
    expected = [(str(stranger), "from another run (world size 300, the run has 2)")]
    assert [(s.path, s.reason) for s in run.skipped] == expected
    assert [(s["path"], s["reason"]) for s in analysis.run["skipped_files"]] == expected


def test_more_ranks_of_a_large_world_beat_one_trace_of_a_small_one(tmp_path):
    run_dir = tmp_path / "run"
    for rank in (0, 1, 2):
        write_trace(run_dir / f"rank{rank}.json",
                    trace_doc(rank, world_size=8, events=two_step_events(rank)))
    stranger = write_trace(run_dir / "other.json", trace_doc(0, world_size=2))
    run = load_run(run_dir, cache=False, workers=1)
    assert run.rank_ids == [0, 1, 2] and run.world_size == 8
    assert [s.path for s in run.skipped] == [str(stranger)]
