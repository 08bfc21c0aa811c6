"""A folder of far too many files: refused fast with a clear message, in bounded memory,
without a ``stat`` of every file; a long walk says how far it has got."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from profkit.errors import UsageError
from profkit.run import discover

REPO = Path(__file__).resolve().parents[1]


def empty_files(folder: Path, count: int, name: str = "rank{}.json") -> Path:
    """``count`` empty files named ``name`` in ``folder``: no valid trace, only names."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.close(os.open(folder / name.format(i), os.O_CREAT | os.O_WRONLY, 0o644))
    return folder


def summary(folder: Path, limit: int | None) -> tuple[subprocess.CompletedProcess, float]:
    """``profkit summary FOLDER`` (with ``$PROFKIT_MAX_FILES`` = ``limit``) and its seconds;
    the process's own peak RSS in KiB is ``proc.maxrss_kib`` (``os.wait4`` of that child,
    not RUSAGE_CHILDREN, which holds the largest of every child this test process had)."""
    env = {k: v for k, v in os.environ.items() if k != discover.MAX_FILES_ENV}
    if limit is not None:
        env[discover.MAX_FILES_ENV] = str(limit)
    cmd = [sys.executable, "-m", "profkit", "summary", str(folder)]
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.monotonic() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(cmd, child.returncode, out.read(), err.read())
    proc.maxrss_kib = usage.ru_maxrss
    return proc, seconds


def test_a_folder_of_more_trace_files_than_the_limit_is_refused_fast(tmp_path):
    folder = empty_files(tmp_path / "dump", 20_000)
    proc, seconds = summary(folder, limit=5_000)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert proc.stdout == ""
    err = proc.stderr
    assert f"{folder} holds more than 5,000 files named like traces" in err
    assert "pass a sub-folder" in err and "PROFKIT_MAX_FILES=50000" in err
    assert len(err) < 1000  # one line, not a line per file
    assert seconds < 8  # refused before reading any file (reading them all took longer)


def test_the_limit_counts_trace_names_only(tmp_path, monkeypatch):
    folder = empty_files(tmp_path / "run", 3_000, "notes{}.txt")
    empty_files(folder, 3, "rank{}.json")
    monkeypatch.setenv(discover.MAX_FILES_ENV, "10")
    traces, skipped = discover.find_trace_files(folder)
    assert [p.name for p in traces] == ["rank0.json", "rank1.json", "rank2.json"]
    assert skipped == []


def test_files_no_trace_is_named_like_are_not_stat_ed(tmp_path, monkeypatch):
    folder = empty_files(tmp_path / "run", 2_000, "notes{}.txt")
    empty_files(folder, 2, "rank{}.json")
    calls = []
    real_stat = os.stat
    monkeypatch.setattr(discover.os, "stat", lambda *a, **k: calls.append(a) or real_stat(*a, **k))
    assert len(discover.find_trace_files(folder)[0]) == 2
    assert len(calls) < 10  # the folder and its two traces, not 2,002 entries


def test_a_bad_limit_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv(discover.MAX_FILES_ENV, "lots")
    with pytest.raises(UsageError, match="PROFKIT_MAX_FILES='lots': expected a whole number"):
        discover.find_trace_files(tmp_path)


def test_a_long_walk_says_how_far_it_has_got(tmp_path, monkeypatch, capsys):
    folder = empty_files(tmp_path / "run", 3_000)
    monkeypatch.setattr(discover, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(discover, "PROGRESS_EVERY_S", 0.0)
    assert len(discover.find_trace_files(folder)[0]) == 3_000
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith(f"profkit: searching {folder}: ") for line in lines)
    assert "named like traces so far" in lines[-1]


@pytest.mark.slow
def test_a_crowd_of_files_is_refused_in_seconds_and_bounded_memory(tmp_path):
    """The default limit against 3 x 10^5 names (10^6 took minutes to create on a loaded
    machine; refusing them took 1 s in 130 MB, where profkit summary printed nothing for
    90 s and grew past 1.1 GB before the limit)."""
    folder = empty_files(tmp_path / "crowd", 300_000)
    try:
        proc, seconds = summary(folder, limit=None)
        peak_mb = proc.maxrss_kib / 1024
        assert proc.returncode == 2, proc.stderr[-500:]
        assert "holds more than 100,000 files named like traces" in proc.stderr
        assert seconds < 20, seconds
        assert peak_mb < 400, peak_mb
    finally:
        shutil.rmtree(folder, ignore_errors=True)
