"""A second profiler never kills the job: profile() inside a user's torch.profiler.profile,
or inside another profile(), starts no torch profiler of its own (Kineto keeps one session
per process; a second one made the process die with SIGSEGV when the outer profiler exported
its trace, on CPU too). Each job runs in a subprocess, so that a crash is an exit code."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest

from profkit.cli import main

JOB = textwrap.dedent('''
    import sys, torch, torch.profiler as tp
    from profkit.collectors import profile

    outer_kind, out, device = sys.argv[1], sys.argv[2], sys.argv[3]
    model = torch.nn.Linear(64, 64).to(device)

    def loop(p, steps):
        for _ in range(steps):
            model(torch.randn(8, 64, device=device)).sum().backward()
            p.step()

    acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if device == "cuda" else [])
    if outer_kind == "torch":
        outer = tp.profile(activities=acts)
    elif outer_kind == "torch-scheduled":  # the outer one waits, then records beside ours
        outer = tp.profile(activities=acts, schedule=tp.schedule(wait=1, warmup=1, active=2))
    else:
        outer = profile(out + "/outer", wait=0, warmup=0, active=2, nvml=False)
    with outer:
        with profile(out + "/inner", wait=0, warmup=0, active=2, nvml=False) as inner:
            loop(inner, 3)
            if outer_kind == "torch-scheduled":
                loop(outer, 4)
        if outer_kind == "profkit":
            loop(outer, 3)
    if outer_kind == "torch":
        outer.export_chrome_trace(out + "/outer.json")
    elif outer_kind == "torch-scheduled":
        outer.export_chrome_trace(out + "/outer.json")
    print("job done")
''')

WARNING = "profkit: no trace captured into"


def run_job(tmp_path, outer_kind: str, device: str = "cpu") -> subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(script), outer_kind, str(tmp_path), device],
                          capture_output=True, text=True, timeout=120, env=env)


def outer_names(tmp_path) -> set[str]:
    """The event names of the outer profiler's trace (it must be whole JSON)."""
    if (tmp_path / "outer.json").exists():
        trace = json.loads((tmp_path / "outer.json").read_text())
    else:
        with gzip.open(tmp_path / "outer" / "traces" / "rank0.pt.trace.json.gz", "rt") as fh:
            trace = json.load(fh)
    return {str(e.get("name", "")) for e in trace["traceEvents"]}


def check_job(tmp_path, proc, reason: str) -> None:
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "job done" in proc.stdout
    assert proc.stderr.count(WARNING) == 1, proc.stderr[-3000:]
    assert reason in proc.stderr
    inner = tmp_path / "inner"
    run = json.loads((inner / "run.json").read_text())
    assert run["status"] == "incomplete" and reason in run["trace_skipped"]
    status = json.loads((inner / "ranks" / "rank0.json").read_text())
    assert status["traces"] == [] and status["steps"] == 3
    assert status["capture_stopped"]["what"] == "trace"
    assert not (inner / "traces").exists()


@pytest.mark.parametrize("outer_kind, reason", [
    ("torch", "a torch profiler is recording in this process"),
    ("torch-scheduled", "a torch.profiler.profile is started in this process"),
    ("profkit", "another profkit profile() is capturing in this process"),
])
def test_profile_inside_another_profiler_keeps_the_job_and_the_outer_trace(
        tmp_path, capsys, outer_kind, reason):
    proc = run_job(tmp_path, outer_kind)
    check_job(tmp_path, proc, reason)
    assert "aten::linear" in outer_names(tmp_path)  # the outer profiler's trace is intact
    if outer_kind == "profkit":
        assert json.loads((tmp_path / "outer" / "run.json").read_text())["status"] == "ok"
    assert main(["analyze", str(tmp_path / "inner")]) == 4
    err = capsys.readouterr().err
    assert "no trace files" in err and reason in err


@pytest.mark.gpu
@pytest.mark.parametrize("outer_kind", ["torch", "torch-scheduled", "profkit"])
def test_profile_inside_another_profiler_on_gpu(tmp_path, outer_kind):
    """The crash as first seen, on CUDA with CUPTI (run on a GPU machine)."""
    proc = run_job(tmp_path, outer_kind, device="cuda")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.count(WARNING) == 1
    assert "aten::linear" in outer_names(tmp_path)


LATER = textwrap.dedent('''
    import sys, torch, torch.profiler as tp
    from profkit.collectors import profile

    out = sys.argv[1]
    model = torch.nn.Linear(64, 64)
    with profile(out + "/inner", wait=2, warmup=0, active=2, nvml=False) as p:
        p.step()  # profkit waits for its cycle...
        with tp.profile(activities=[tp.ProfilerActivity.CPU]) as user:  # ...the user starts
            for _ in range(4):
                model(torch.randn(8, 64)).sum().backward()
                p.step()
    user.export_chrome_trace(out + "/outer.json")
    print("job done")
''')


def test_a_torch_profiler_started_while_profile_waits(tmp_path):
    """profile() started first and waits for its cycle; the user's profiler starts recording
    meanwhile: profkit stops its own profiler before its cycle would start beside it."""
    script = tmp_path / "later.py"
    script.write_text(LATER)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    reason = "another torch profiler started recording in this process"
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.count(WARNING) == 1 and reason in proc.stderr
    assert "aten::linear" in outer_names(tmp_path)
    run = json.loads((tmp_path / "inner" / "run.json").read_text())
    assert run["status"] == "incomplete" and run["trace_skipped"] == reason


def test_a_stopped_profiler_is_not_taken_for_a_started_one_on_any_torch():
    """torch 2.11's stop() exits the step range but leaves it set (2.13 clears it): there a
    stopped profiler looked started, and a second profile() in the same process captured
    no trace. A profiler whose with-block was left is stopped whatever its step range says;
    profkit's own profilers are never another profiler."""
    import torch.profiler as tp
    from profkit.collectors.capture import other_profiler as op

    with tp.profile(activities=[tp.ProfilerActivity.CPU],
                    schedule=tp.schedule(wait=1, warmup=1, active=1)) as waiting:
        # in its wait phase: started, on a torch that clears the range or one that does not
        assert op._between_start_and_stop(waiting, stop_clears=True)
        assert op._between_start_and_stop(waiting, stop_clears=False)
    waiting.step_rec_fn = object()  # as torch 2.11 leaves it after stop()
    assert not op._between_start_and_stop(waiting, stop_clears=False)
    waiting.step_rec_fn = None
    with tp.profile(activities=[tp.ProfilerActivity.CPU],
                    schedule=tp.schedule(wait=1, warmup=1, active=1)) as ours:
        try:
            assert op._started_torch_profiler()
            op.mark_started(object(), ours)  # one of profkit's own: not another profiler
            assert not op._started_torch_profiler()
        finally:
            op._ours.discard(ours)
            op._started.clear()
    ours.step_rec_fn = None  # nothing this test made may look started to a later test
