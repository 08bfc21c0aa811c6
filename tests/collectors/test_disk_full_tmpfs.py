"""profile() on CPU into a real, small tmpfs that fills up during the job: the job goes on,
the capture stops, the status files say what is lost, no temporary is left, and ``profkit
analyze`` says what is missing. Needs root and a kernel that lets it mount a tmpfs (skipped
with the reason otherwise); each test takes a few seconds."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import subprocess
import time

import pytest
import torch
from profkit.collectors import profile

from profkit.cli import main


@pytest.fixture
def small_disk(tmp_path):
    """``mount(size_mib)``: a fresh tmpfs of that size at ``tmp_path/disk``, unmounted at
    the end of the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "disk"
    point.mkdir()
    mounted = []

    def mount(size_mib: int):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs",
                            str(point)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
        mounted.append(point)
        return point

    yield mount
    for p in mounted:
        subprocess.run(["umount", "-l", str(p)], check=False)


def fill(folder) -> os.PathLike:
    """Fill the disk of ``folder`` to the last byte; returns the filler file."""
    path = folder / "filler"
    with open(path, "wb", buffering=0) as fh:
        for block in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(bytes(block))
    with pytest.raises(OSError) as info:
        (folder / "probe").write_bytes(b"x" * 4096)
    assert info.value.errno == errno.ENOSPC
    return path


def train(p, steps: int, pause_s: float = 0.0) -> int:
    model = torch.nn.Linear(16, 16)
    for _ in range(steps):
        model(torch.randn(4, 16)).sum().backward()
        p.step()
        time.sleep(pause_s)
    return steps


def status_of(run_dir) -> dict:
    return json.loads((run_dir / "ranks" / "rank0.json").read_text())


def temporaries(folder) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.name.startswith(".tmp-")]


def loss_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "profkit.collectors.capture.losses" and r.levelno == logging.WARNING]


def test_the_reported_job_default_settings_300_mb_disk(small_disk, caplog, capsys):
    """Issue 25: a 300 MB tmpfs, default settings, the disk full before the first trace is
    saved. The job used to die at step 3 with FileNotFoundError from prof.step()."""
    disk = small_disk(300)
    run = disk / "run"
    with caplog.at_level(logging.WARNING):
        with profile(run) as p:
            filler = fill(disk)
            assert train(p, 8) == 8
    (warning,) = loss_warnings(caplog)
    assert str(run) in warning and "no space left on device" in warning
    status = status_of(run)
    assert status["status"] == "incomplete" and status["traces"] == [] and status["steps"] == 8
    assert status["capture_stopped"]["errno"] == "ENOSPC"
    assert json.loads((run / "run.json").read_text())["status"] == "incomplete"
    assert temporaries(disk) == []
    os.unlink(filler)
    assert main(["analyze", str(run)]) == 4
    err = capsys.readouterr().err
    assert "no trace files" in err and "rank 0: capture stopped at step 4: cannot write " \
           "traces/rank0.pt.trace.json.gz: no space left on device" in err


def test_traces_and_nvml_on_a_disk_that_fills_up(small_disk, caplog, capsys, fake_nvml):
    disk = small_disk(8)
    run = disk / "run"
    with caplog.at_level(logging.WARNING):
        with profile(run, wait=0, warmup=0, active=1, repeat=0, nvml=fake_nvml(),
                     nvml_gpus=[0], nvml_hz=100.0, nvml_chunk_s=0.02, min_free_bytes=0) as p:
            train(p, 3, pause_s=0.03)  # three cycles saved, NVML chunks written
            filler = fill(disk)
            deadline = time.monotonic() + 10
            while p.session.losses.stopped is None and time.monotonic() < deadline:
                train(p, 1, pause_s=0.01)
            assert train(p, 5) == 5
    assert len(loss_warnings(caplog)) == 1
    status = status_of(run)
    assert status["status"] == "incomplete"
    assert status["traces"][:3] == ["rank0.pt.trace.json.gz", "rank0.cycle1.pt.trace.json.gz",
                                    "rank0.cycle2.pt.trace.json.gz"]
    assert status["nvml_chunks"] and status["capture_stopped"]["errno"] == "ENOSPC"
    assert {e["what"] for e in status["lost"]} <= {"trace", "nvml"}
    assert json.loads((run / "run.json").read_text())["status"] == "incomplete"
    assert temporaries(disk) == []
    os.unlink(filler)
    assert main(["analyze", "--no-cache", str(run)]) == 0
    out = capsys.readouterr().out
    assert "RUN STATUS: incomplete (rank 0: capture stopped at step" in out
    assert "no space left on device" in out and "note: rank 0: capture stopped" in out


def test_in_job_report_on_a_full_disk(small_disk):
    """The disk is full when the job ends: the statuses are written in the reserve's room;
    the report is written in what is left of it, or listed as lost (test_disk_full.py
    makes its write fail for certain)."""
    disk = small_disk(8)
    run = disk / "run"
    with profile(run, wait=0, warmup=0, active=2, nvml=False, summarize=True,
                 min_free_bytes=0) as p:
        assert train(p, 3) == 3
        fill(disk)  # after the trace, before the statuses and the report
    status = status_of(run)
    assert status["traces"] == ["rank0.pt.trace.json.gz"]
    report = run / "profkit-report" / "report.json"
    assert status["status"] == "ok"
    assert json.loads((run / "run.json").read_text())["status"] == "ok"
    if report.exists():
        assert json.loads(report.read_text())["run"]
    else:
        assert [e["what"] for e in status["lost"]] == ["report"]
    assert temporaries(disk) == []
