"""`profkit launch` through the installed console script: the documented command line, a
2-rank torchrun job on CPU/gloo under it, --help, bad input, and the module entry point."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from profkit.collectors.launch import _parser as launch_parser

from profkit.cli import build_parser
from profkit.run.loader import load_run

PROFKIT = Path(sys.executable).with_name("profkit")  # the console script of this environment
ENV_CHILD = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in "
             "('PROFKIT_RUN_DIR', 'NCCL_DEBUG_FILE', 'PROFKIT_LAUNCH_COMMAND', 'OPENBLAS_NUM_THREADS')}, "
             "open(sys.argv[1], 'w')); sys.exit(3)")
JOB = textwrap.dedent("""
    import os, torch, torch.distributed as dist
    from profkit.collectors import profile

    dist.init_process_group("gloo")
    model = torch.nn.Linear(8, 8)
    with profile(wait=0, warmup=1, active=2, nvml=False) as prof:  # run dir from the launcher
        for _ in range(4):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    dist.destroy_process_group()
    os._exit(0)  # torch (CPU, gloo) can abort in interpreter teardown; the capture is saved
""")


def profkit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    assert PROFKIT.exists(), f"{PROFKIT}: the profkit console script is not installed"
    return run_group([str(PROFKIT), *args], timeout)


def run_group(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own session; on timeout kill the whole group (torchrun's workers
    included) before failing."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"timed out after {timeout} s: {cmd}\n{out[-2000:]}{err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_documented_form_runs_the_command_with_the_launch_env(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    out, run = tmp_path / "env.json", tmp_path / "run"
    r = profkit("launch", "--run-dir", str(run), "--", sys.executable, "-c", ENV_CHILD, str(out))
    assert r.returncode == 3, r.stderr  # the command's own exit code
    env = json.loads(out.read_text())
    assert env["PROFKIT_RUN_DIR"] == str(run.resolve())
    assert env["NCCL_DEBUG_FILE"] == str(run.resolve() / "nccl" / "rank.%h.%p.log")
    assert json.loads(env["PROFKIT_LAUNCH_COMMAND"])[:2] == [sys.executable, "-c"]
    assert env["OPENBLAS_NUM_THREADS"] is None  # the analysis commands' setting is not the job's


def test_form_without_double_dash(tmp_path):
    out = tmp_path / "env.json"
    r = profkit("launch", f"--run-dir={tmp_path / 'run'}", sys.executable, "-c", ENV_CHILD,
                str(out))
    assert r.returncode == 3, r.stderr
    assert json.loads(out.read_text())["PROFKIT_RUN_DIR"] == str((tmp_path / "run").resolve())


def test_help_shows_run_dir():
    r = profkit("launch", "--help")
    assert r.returncode == 0 and "--run-dir RUN_DIR" in r.stdout


def test_cli_and_module_declare_the_same_options():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["launch"]

    def options(p):
        return {(a.dest, tuple(a.option_strings), a.nargs, a.required) for a in p._actions}

    assert options(sub) == options(launch_parser())


def test_bad_input_is_a_clear_error(tmp_path):
    r = profkit("launch", "--run-dir", str(tmp_path / "run"), "--")
    assert r.returncode == 1 and "no command given after '--'" in r.stderr
    r = profkit("launch", "--run-dir", str(tmp_path / "run"), "--", str(tmp_path / "nope"))
    assert r.returncode == 1 and "cannot run" in r.stderr and "nope" in r.stderr
    r = profkit("launch", "--", "true")
    assert r.returncode == 2 and "--run-dir" in r.stderr


def test_module_entry_point_without_runpy_warning(tmp_path):
    r = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m",
                        "profkit.collectors.launch", "--run-dir", str(tmp_path), "--",
                        sys.executable, "-c", "raise SystemExit(4)"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 4, r.stderr
    assert "RuntimeWarning" not in r.stderr


def test_two_rank_torchrun_job_under_launch(tmp_path):
    script, run = tmp_path / "job.py", tmp_path / "run"
    script.write_text(JOB)
    r = profkit("launch", "--run-dir", str(run), "--", sys.executable, "-m",
                "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                "--master_port", str(free_port()), str(script), timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((run / "run.json").read_text())
    assert doc["status"] == "ok" and doc["world_size"] == 2
    assert doc["command"][-1] == str(script)  # what profkit launch ran, not a rank's argv
    for rank in (0, 1):
        status = json.loads((run / "ranks" / f"rank{rank}.json").read_text())
        assert status["status"] == "ok" and status["steps"] == 4
    loaded = load_run(run, cache=False)
    assert sorted(loaded.ranks) == [0, 1]
    assert all(len(loaded.ranks[r].steps) == 2 for r in (0, 1))  # the two active steps
