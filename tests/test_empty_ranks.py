"""A rank file with nothing usable in it (no events, no event with a usable time, nothing a
profiler writes) is named once as skipped, and the other ranks are still analysed; a rank of
CPU events only, beside GPU ranks, is analysed without breaking the run's breakdown."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from profkit import cli
from profkit.run.loader import load_run
from tests.conftest import REPO

RANK0 = REPO / "samples" / "runs" / "zoo" / "straggler" / "traces" / "rank0.pt.trace.json.gz"
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 5}
EMPTY_FILES = {
    "a list": [],
    "no events": {"traceEvents": []},
    "no ts": {"traceEvents": [KERNEL]},
    "ts as text": {"traceEvents": [dict(KERNEL, ts="abc", dur="5")]},
    "ts 1e308": {"traceEvents": [dict(KERNEL, ts=1e308)]},
    "foreign one-event trace": {"traceEvents": [{"ph": "X", "name": "frame", "ts": 1,
                                                 "dur": 1, "pid": 1, "tid": 1}]},
    "one instant": {"traceEvents": [{"ph": "i", "name": "mark", "ts": 1, "pid": 1, "tid": 1}]},
    "metadata only": {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1,
                                       "args": {"name": "python"}}]},
}


def run_with(tmp_path: Path, doc) -> tuple[Path, Path]:
    """A run folder: a real rank 0 and ``doc`` as rank1.json."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(RANK0, run / "rank0.pt.trace.json.gz")
    bad = run / "rank1.json"
    bad.write_text(json.dumps(doc))
    return run, bad


@pytest.mark.parametrize("shape", sorted(EMPTY_FILES))
def test_an_empty_rank_is_named_once_and_the_others_analysed(tmp_path, capsys, shape):
    run, bad = run_with(tmp_path, EMPTY_FILES[shape])
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1"]) == 0
    out, err = (" ".join(text.split()) for text in capsys.readouterr())  # lines may wrap
    assert "1 of 2 ranks analysed: 1 missing (1)" in out
    assert f"skipped: {bad}: no usable events" in out
    assert (out + err).count(str(bad)) == 1, out + err
    assert "Traceback" not in err


@pytest.mark.parametrize("shape", ["a list", "ts 1e308"])
def test_an_empty_rank_is_skipped_by_every_reader(tmp_path, capsys, shape):
    run, bad = run_with(tmp_path, EMPTY_FILES[shape])
    loaded = load_run(run, cache=False, workers=1)
    assert loaded.rank_ids == [0]
    assert [s.path for s in loaded.skipped] == [str(bad)]
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1", "--strict"]) == 7
    assert cli.main(["summary", str(run), "--no-cache"]) == 0
    assert f"skipped: {bad}: no usable events" in " ".join(capsys.readouterr().out.split())


def test_a_cpu_only_rank_beside_a_gpu_rank_is_analysed(tmp_path, capsys):
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1.7e15, "dur": 10,
          "pid": 1, "tid": 1}
    run, _ = run_with(tmp_path, {"traceEvents": [op]})
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "2 of 2 ranks analysed" in out and "VERDICT: compute bound" in out
    assert "Traceback" not in err


def test_a_folder_of_many_unreadable_files_names_a_few_and_counts_the_rest(tmp_path):
    """The error for a folder with no readable trace names the first files it skipped
    and counts the others (it listed every one: several MB for 100,000 empty files)."""
    for i in range(25):
        (tmp_path / f"rank{i}.json").write_text('{"traceEvents": []}')
    with pytest.raises(Exception, match="no readable trace") as raised:
        load_run(tmp_path, cache=False, workers=1)
    text = str(raised.value)
    assert text.count(".json: ") == 20 and text.endswith("; and 5 more)")
