"""A second capture into one run directory loses nothing silently: a second profile() of the
same process continues the first (same run, the next cycle numbers), and a second job
profiling into the folder while the first does is refused with a warning, its training
going on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import torch
from profkit.collectors import profile

from profkit.run.loader import load_run

TRACES = ["rank0.cycle1.pt.trace.json.gz", "rank0.cycle2.pt.trace.json.gz",
          "rank0.cycle3.pt.trace.json.gz", "rank0.pt.trace.json.gz"]


def train(p, steps: int) -> None:
    model = torch.nn.Linear(16, 16)
    for _ in range(steps):
        model(torch.randn(4, 16)).sum().backward()
        p.step()


def test_two_sessions_in_one_process_keep_every_cycle(tmp_path):
    for _ in range(2):
        with profile(tmp_path, wait=0, warmup=0, active=1, repeat=2, nvml=False) as p:
            train(p, 3)
    assert sorted(f.name for f in (tmp_path / "traces").iterdir()) == TRACES
    status = json.loads((tmp_path / "ranks" / "rank0.json").read_text())
    assert sorted(status["traces"]) == TRACES and status["status"] == "ok"
    run = load_run(tmp_path, cache=False)
    assert sorted(os.path.basename(f) for f in run.meta["rank_files"]["0"]) == TRACES
    assert not any("set aside" in n or "another run" in n for n in run.notes)


def test_an_emptied_folder_starts_a_new_run(tmp_path):
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 2)
    (tmp_path / "traces" / "rank0.pt.trace.json.gz").unlink()
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 2)
    assert [f.name for f in (tmp_path / "traces").iterdir()] == ["rank0.pt.trace.json.gz"]


JOB = textwrap.dedent('''
    import pathlib, sys, time, torch
    from profkit.collectors import profile

    run_dir, ready, go = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    model = torch.nn.Linear(16, 16)
    with profile(run_dir, wait=0, warmup=0, active=2, nvml=False) as p:
        ready.touch()
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
            p.step()
    print("job done", p.run_dir)
''')


def start_job(tmp_path, name: str) -> tuple[subprocess.Popen, object, object]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    ready, go = tmp_path / f"{name}.ready", tmp_path / f"{name}.go"
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(ready),
                             str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return proc, ready, go


def test_a_second_job_into_the_same_folder_is_refused_and_goes_on(tmp_path):
    first, ready, go = start_job(tmp_path, "first")
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), first.stderr.read() if first.poll() is not None else "slow"
        second, ready2, go2 = start_job(tmp_path, "second")
        go2.touch()
        out2, err2 = second.communicate(timeout=120)
    finally:
        go.touch()
        out1, err1 = first.communicate(timeout=120)
    assert second.returncode == 0 and "job done None" in out2, err2[-2000:]
    assert err2.count("profkit: no capture into") == 1
    assert f"another capture (process {first.pid} on " in err2
    assert first.returncode == 0 and "job done" in out1, err1[-2000:]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    status = json.loads((tmp_path / "run" / "ranks" / "rank0.json").read_text())
    assert run["status"] == "ok" and status["pid"] == first.pid and status["steps"] == 3
    assert run["run_id"] == status["run_id"]
    assert status["traces"] == ["rank0.pt.trace.json.gz"]
