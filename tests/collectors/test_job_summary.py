"""profile(summarize=True): the run's analysis written by rank 0 when the capture ends.

The distributed cases run real 2-process gloo jobs on CPU under torchrun, as
test_collectors_ddp.py does; the single-process cases run here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.render import to_json
from profkit.collectors import job_summary, profile

from profkit.discover import find_trace_files
from profkit.loader import load_run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

# mode: "ok" (DDP training), "raise" (rank 1 raises inside the context after training),
# "late" (rank 1 reaches the end of the context only after the others gave up waiting).
JOB = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from profkit.collectors import profile

    out, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    err = RuntimeError(f"boom on rank {rank}")
    t0 = time.monotonic()
    try:
        with profile(out + "/run", wait=1, warmup=1, active=2, nvml=False,
                     summarize=True) as p:
            for _ in range(4):
                model(torch.randn(16, 32)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
                p.step()
            if mode == "raise" and rank == 1:
                raise err
            if mode == "late" and rank == 1:
                time.sleep(6)
    except BaseException as e:
        with open(f"{out}/rank{rank}.raised", "w") as f:
            f.write(f"{type(e).__name__}|{e}|{e is err}")
    with open(f"{out}/rank{rank}.done", "w") as f:
        f.write(str(time.monotonic() - t0))
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)  # skip teardown (see test_collectors_ddp.py)
""")


def run_job(tmp_path, mode, timeout_s=None):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if timeout_s is not None:
        env[job_summary.TIMEOUT_ENV] = str(timeout_s)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
           str(tmp_path), mode]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp_path / "run", r


def report(run_dir):
    return json.loads((run_dir / "profkit-report" / "report.json").read_bytes())


def test_two_rank_job_writes_the_runs_analysis(tmp_path):
    run_dir, _ = run_job(tmp_path, "ok")
    doc = report(run_dir)
    assert doc["schema"] == "profkit.analysis/1"
    assert doc["run"]["world_size"] == 2 and doc["run"]["ranks_analyzed"] == [0, 1]
    assert doc["run"]["status"] == "ok" and doc["run"]["skipped_files"] == []
    assert doc["ranks"] == []  # per-rank step breakdowns need GPU events; this job is CPU
    text = (run_dir / "profkit-report" / "report.txt").read_text()
    assert text.startswith(f"profkit analysis of {run_dir}") and "VERDICT:" in text

    # the same analysis as the library's map-reduce over the trace files, afterwards
    assert doc == json.loads(json.dumps(to_json(analyze_run(run_dir, workers=1, cache=False))))
    # the report is not taken for a trace, nor skipped with a note, when the run is read
    traces, skipped = find_trace_files(run_dir)
    assert [t.name for t in traces] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert skipped == []
    assert load_run(run_dir, cache=False).skipped == []


def test_a_rank_that_raises_is_reported_failed_and_nobody_hangs(tmp_path):
    started = time.monotonic()
    run_dir, _ = run_job(tmp_path, "raise")
    assert time.monotonic() - started < 45
    # the user's exception reached the user's code, the same object, on rank 1 only
    assert (tmp_path / "rank1.raised").read_text() == "RuntimeError|boom on rank 1|True"
    assert not (tmp_path / "rank0.raised").exists()
    assert (tmp_path / "rank0.done").exists() and (tmp_path / "rank1.done").exists()

    # rank 0 wrote the report: rank 1's trace skipped with its failure, the run failed
    doc = report(run_dir)
    assert doc["run"]["status"] == "failed" and doc["run"]["world_size"] == 2
    assert doc["run"]["ranks_analyzed"] == [0]
    ((skip),) = doc["run"]["skipped_files"]
    assert skip["path"].endswith("traces/rank1.pt.trace.json.gz")
    assert skip["reason"] == "rank 1 failed: RuntimeError: boom on rank 1"
    assert "skipped:" in (run_dir / "profkit-report" / "report.txt").read_text()


def test_a_rank_that_never_arrives_costs_only_the_report(tmp_path):
    started = time.monotonic()
    run_dir, r = run_job(tmp_path, "late", timeout_s=2)
    assert time.monotonic() - started < 45
    assert not (run_dir / "profkit-report").exists()
    assert "no in-job summary" in r.stderr
    # rank 0 gave up after about the timeout instead of waiting for rank 1's 6 s
    assert float((tmp_path / "rank0.done").read_text()) < 5.5
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"


def train(p, steps):
    model = torch.nn.Linear(16, 16)
    for _ in range(steps):
        model(torch.randn(4, 16)).sum().backward()
        p.step()


def test_single_process_run_writes_the_report(tmp_path):
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 4)
    doc = report(tmp_path)
    assert doc["schema"] == "profkit.analysis/1"
    assert doc["run"]["ranks_analyzed"] == [0] and doc["run"]["world_size"] == 1
    assert doc["run"]["status"] == "ok"
    assert (tmp_path / "profkit-report" / "report.txt").is_file()
    assert json.loads((tmp_path / "run.json").read_text())["profiler"]["summarize"] is True


def test_no_report_unless_asked(tmp_path):
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False) as p:
        train(p, 4)
    assert (tmp_path / "traces" / "rank0.pt.trace.json.gz").is_file()
    assert not (tmp_path / "profkit-report").exists()


def test_single_process_failure_propagates_and_is_reported(tmp_path):
    err = ValueError("bad batch")
    with pytest.raises(ValueError) as info:
        with profile(tmp_path, wait=0, warmup=0, active=2, nvml=False, summarize=True) as p:
            train(p, 3)
            raise err
    assert info.value is err
    # the only rank failed: nothing to analyse, so no report, and no error from profkit
    assert not (tmp_path / "profkit-report").exists()


def test_a_failing_summary_never_reaches_the_user(tmp_path, monkeypatch, caplog):
    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(job_summary, "write_bytes_atomic", broken)
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 4)
    assert "no in-job summary" in caplog.text and "disk full" in caplog.text
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "ok"


def test_no_summary_for_triggered_captures(tmp_path):
    flag = tmp_path / "go"
    with profile(tmp_path, wait=0, warmup=0, active=2, nvml=False, summarize=True,
                 trigger=f"file:{flag}", trigger_every=1) as p:
        for i in range(6):
            if i == 1:
                flag.touch()
            torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum().backward()
            p.step()
    (cap,) = [c for c in tmp_path.iterdir() if c.name.startswith("capture-0-")]
    assert (cap / "traces" / "rank0.pt.trace.json.gz").is_file()
    assert not list(tmp_path.rglob("report.json"))


def test_a_run_without_traces_gets_no_report(tmp_path, caplog):
    with profile(tmp_path, wait=1, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 1)  # ends before the schedule saves a trace
    assert not (tmp_path / "profkit-report").exists()
    assert "wrote no trace" in caplog.text


def test_run_facts_without_a_readable_run_json():
    session = SimpleNamespace(info=SimpleNamespace(host="b"), run_facts={
        "gpus": [{"host": "a", "uuid": "GPU-a"}, {"host": "b", "uuid": "GPU-b"}],
        "clock_offsets_ns": {"0": 0, "1": 7}})
    assert job_summary.run_meta(session, {"gpus": [], "x": 1}) == {"gpus": [], "x": 1}
    assert job_summary.run_meta(session, {}) == {
        "gpus": [{"host": "b", "uuid": "GPU-b"}], "clock_offsets_ns": {"0": 0, "1": 7}}
