"""A write that fails during the job (a full disk, an I/O error) stops the capture, never the
job: profile() on CPU with ENOSPC injected at the os level, for each writer of the capture
(traces, NVML chunks, the flight-recorder dump, the in-job report). The same on a real full
disk: tests/collectors/test_disk_full_tmpfs.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import time

import pytest
import torch
from profkit.collectors import profile

from profkit.cli import main
from profkit.run.runmeta import capture_loss

LOSSES_LOG = "profkit.collectors.capture.losses"


def fail_replace(monkeypatch, part: str, code: int = errno.ENOSPC) -> list[str]:
    """Make every rename into a path containing ``part`` fail with ``code``, as the last
    step of an atomic write does on a full disk; returns the paths refused."""
    refused, real = [], os.replace

    def replace(src, dst, *args, **kwargs):
        if part in str(dst):
            refused.append(str(dst))
            raise OSError(code, os.strerror(code))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return refused


def train(p, steps: int, pause_s: float = 0.0) -> int:
    model = torch.nn.Linear(16, 16)
    done = 0
    for _ in range(steps):
        model(torch.randn(4, 16)).sum().backward()
        p.step()
        done += 1
        time.sleep(pause_s)
    return done


def status_of(run_dir, rank: int = 0) -> dict:
    return json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())


def run_json(run_dir) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def temporaries(run_dir) -> list[str]:
    return [str(p) for p in run_dir.rglob("*") if p.name.startswith(".tmp-")]


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOSSES_LOG and r.levelno == logging.WARNING]


def test_trace_write_failure_stops_the_capture_and_the_job_goes_on(tmp_path, monkeypatch,
                                                                   caplog, capsys):
    refused = fail_replace(monkeypatch, "rank0.cycle1.pt.trace")
    with caplog.at_level(logging.WARNING):
        with profile(tmp_path, wait=0, warmup=0, active=1, repeat=4, nvml=False) as p:
            assert train(p, 8) == 8
    assert refused
    (warning,) = warnings_of(caplog)
    assert str(tmp_path) in warning and "no space left on device" in warning
    status = status_of(tmp_path)
    assert status["status"] == "incomplete" and status["error"] is None
    assert status["traces"] == ["rank0.pt.trace.json.gz"]
    assert status["capture_stopped"]["errno"] == "ENOSPC"
    assert status["capture_stopped"]["file"] == "traces/rank0.cycle1.pt.trace.json.gz"
    assert status["lost"][0]["cycle"] == 1 and status["steps"] == 8
    assert run_json(tmp_path)["status"] == "incomplete"
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["rank0.pt.trace.json.gz"]
    assert temporaries(tmp_path) == []
    monkeypatch.undo()
    assert main(["analyze", "--no-cache", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the report wraps at the terminal's width
    assert "RUN STATUS: incomplete (rank 0: capture stopped at step 1: cannot write " \
           "traces/rank0.cycle1.pt.trace.json.gz: no space left on device" in out
    assert "lost: the trace of profiler cycle 1 (traces/rank0.cycle1.pt.trace.json.gz)" in out


def test_first_trace_lost_analyze_says_why_there_is_none(tmp_path, monkeypatch, capsys):
    """The reported job: default schedule, the disk full when the first trace is saved."""
    fail_replace(monkeypatch, "traces")
    with profile(tmp_path, nvml=False) as p:
        assert train(p, 6) == 6
    assert status_of(tmp_path)["traces"] == [] and run_json(tmp_path)["status"] == "incomplete"
    assert temporaries(tmp_path) == []
    monkeypatch.undo()
    assert main(["analyze", str(tmp_path)]) == 4
    err = capsys.readouterr().err
    assert "no trace files" in err and "rank 0: capture stopped at step 4" in err
    assert "no space left on device" in err


@pytest.mark.parametrize("code", [errno.EIO, errno.EACCES])
def test_any_write_error_counts(tmp_path, monkeypatch, code):
    fail_replace(monkeypatch, "traces", code)
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        assert train(p, 3) == 3
    assert status_of(tmp_path)["capture_stopped"]["errno"] == errno.errorcode[code]


def test_trace_folder_removed_during_the_job(tmp_path, caplog):
    (tmp_path / "traces").mkdir(parents=True)
    with caplog.at_level(logging.WARNING):
        with profile(tmp_path, wait=1, warmup=0, active=1, nvml=False) as p:
            (tmp_path / "traces").rmdir()
            (tmp_path / "traces").write_text("a file where the folder was")
            assert train(p, 4) == 4
    assert status_of(tmp_path)["status"] == "incomplete"
    assert len(warnings_of(caplog)) == 1 and temporaries(tmp_path) == []


def test_nvml_chunk_write_failure(tmp_path, monkeypatch, caplog, fake_nvml):
    fail_replace(monkeypatch, f"{os.sep}nvml{os.sep}")
    with caplog.at_level(logging.WARNING):
        with profile(tmp_path, wait=0, warmup=0, active=50, nvml=fake_nvml(), nvml_gpus=[0],
                     nvml_hz=100.0, nvml_chunk_s=0.02) as p:
            deadline = time.monotonic() + 10
            while not status_lost(p) and time.monotonic() < deadline:
                train(p, 1, pause_s=0.01)
            assert train(p, 3) == 3  # and the job goes on
    status = status_of(tmp_path)
    assert status["status"] == "incomplete" and status["nvml_chunks"] == []
    nvml = [e for e in status["lost"] if e["what"] == "nvml"]
    assert nvml[0]["file"] == "nvml/rank0.0.npz" and nvml[0]["samples"] > 0
    assert status["capture_stopped"]["what"] == "nvml"
    (warning,) = warnings_of(caplog)
    assert str(tmp_path) in warning and "no space left on device" in warning
    assert not (tmp_path / "nvml").exists() or not list((tmp_path / "nvml").iterdir())
    assert temporaries(tmp_path) == []


def status_lost(p) -> bool:
    session = p.session
    return session is None or bool(session.losses.lost)


def test_flight_recorder_dump_failure_is_lost_not_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "100")
    refused = fail_replace(monkeypatch, "flight_recorder_rank0")
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 2)
    if not refused:
        pytest.skip("this torch build has no flight-recorder dump API")
    status = status_of(tmp_path)
    assert status["status"] == "incomplete" and status["error"] is None
    assert status["lost"][0]["what"] == "flight recorder"
    assert status["lost"][0]["file"] == "nccl/flight_recorder_rank0.pkl"
    assert temporaries(tmp_path) == []


def test_in_job_report_write_failure(tmp_path, monkeypatch, caplog, capsys):
    fail_replace(monkeypatch, "profkit-report")
    with caplog.at_level(logging.WARNING):
        with profile(tmp_path, wait=0, warmup=0, active=2, nvml=False, summarize=True) as p:
            assert train(p, 3) == 3
    assert any("no in-job summary" in r.getMessage() and "no space left on device"
               in r.getMessage() for r in caplog.records)
    status = status_of(tmp_path)  # the capture is whole: `profkit analyze` makes the report
    assert status["status"] == "ok" and status["traces"] == ["rank0.pt.trace.json.gz"]
    assert status["lost"] == [{"what": "report", "file": "profkit-report/report.json",
                               "cause": "no space left on device"}]
    assert status["capture_stopped"] is None and run_json(tmp_path)["status"] == "ok"
    assert temporaries(tmp_path) == []
    monkeypatch.undo()
    assert main(["analyze", str(tmp_path)]) == 0
    assert "note: rank 0: lost: the in-job report (profkit-report/report.json)" in \
        capsys.readouterr().out


def test_a_profiler_that_raises_in_step_stops_the_capture(tmp_path, monkeypatch, caplog):
    import torch.profiler

    real_step = torch.profiler.profile.step
    calls = []

    def step(self):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("Kineto is unwell")
        return real_step(self)

    monkeypatch.setattr(torch.profiler.profile, "step", step)
    with caplog.at_level(logging.WARNING):
        with profile(tmp_path, wait=0, warmup=0, active=5, nvml=False) as p:
            assert train(p, 4) == 4
    (warning,) = warnings_of(caplog)
    assert "the profiler failed in" in warning and "Kineto is unwell" in warning
    status = status_of(tmp_path)
    assert status["status"] == "incomplete"
    assert status["capture_stopped"]["what"] == "profiler" and len(calls) == 2


def test_a_profiler_that_fails_to_stop_lists_the_trace_as_lost(tmp_path, monkeypatch,
                                                               capsys):
    """The trace is saved when the profiler stops; a stop that raises loses it, and the
    status says so (else a rank with no trace would have no reason)."""
    import torch.profiler

    real_stop, refused = torch.profiler.profile.stop, []

    def stop(self):
        refused.append(self)
        raise RuntimeError("Kineto is unwell")

    monkeypatch.setattr(torch.profiler.profile, "stop", stop)
    with profile(tmp_path, wait=0, warmup=0, active=5, nvml=False) as p:
        assert train(p, 2) == 2
    monkeypatch.undo()
    real_stop(refused[0])  # no profiler left running for the next test
    for trace in (tmp_path / "traces").glob("*"):
        trace.unlink()  # what that stop saved
    assert main(["analyze", str(tmp_path)]) != 0
    assert "lost: the trace" in capsys.readouterr().err
    status = status_of(tmp_path)
    assert status["status"] == "failed" and status["traces"] == []
    assert status["error"] == {"type": "profkit.profiler",
                               "message": "RuntimeError('Kineto is unwell')"}
    assert status["lost"] == [{"what": "trace", "file": None, "cause": "Kineto is unwell"}]
    assert status["capture_stopped"] is None
    assert capture_loss(status) == "lost: the trace"
