"""profkit launch: environment passed to the child and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import profkit.collectors.launch as launch
import pytest
from profkit.collectors import CollectorError, launch_main
from profkit.collectors.launch import launch_env

KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE",
        "PROFKIT_RUN_DIR", "PROFKIT_LAUNCH_COMMAND")
CHILD = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[2:]}, "
         "open(sys.argv[1], 'w')); sys.exit(7)")


def test_child_env_and_exit_code(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    monkeypatch.delenv("TORCH_FR_BUFFER_SIZE", raising=False)
    monkeypatch.setattr(launch, "torch_version", lambda: (2, 13))
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT")  # the user's choice is kept
    out, run = tmp_path / "env.json", tmp_path / "run"
    cmd = [sys.executable, "-c", CHILD, str(out), *KEYS]
    assert launch_main(["--run-dir", str(run), "--", *cmd]) == 7
    env = json.loads(out.read_text())
    run = run.resolve()
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT"
    assert env["NCCL_DEBUG_FILE"] == str(run / "nccl" / "rank.%h.%p.log")
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_TRACE_BUFFER_SIZE"] is None
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(run / "nccl" / "flight_recorder_rank")
    assert env["PROFKIT_RUN_DIR"] == str(run)
    assert json.loads(env["PROFKIT_LAUNCH_COMMAND"]) == cmd
    assert (run / "nccl").is_dir()


def test_user_settings_win():
    env = launch_env("/r", ["x"], {"NCCL_DEBUG": "WARN", "TORCH_NCCL_TRACE_BUFFER_SIZE": "5",
                                   "PATH": "/bin"})
    assert env["NCCL_DEBUG"] == "WARN" and env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "5"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,COLL,TUNING,GRAPH,ENV" and env["PATH"] == "/bin"


@pytest.mark.parametrize("version, name", [
    ((2, 13), "TORCH_FR_BUFFER_SIZE"), ((2, 8), "TORCH_FR_BUFFER_SIZE"),
    ((2, 7), "TORCH_NCCL_TRACE_BUFFER_SIZE"), (None, "TORCH_NCCL_TRACE_BUFFER_SIZE")])
def test_the_flight_recorder_buffer_under_the_name_torch_reads(version, name, monkeypatch):
    monkeypatch.setattr(launch, "torch_version", lambda: version)
    env = launch_env("/r", ["x"], {})
    assert {k: v for k, v in env.items() if "BUFFER_SIZE" in k} == {name: "2000"}
    for user in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):  # either name: kept
        env = launch_env("/r", ["x"], {user: "5"})
        assert {k: v for k, v in env.items() if "BUFFER_SIZE" in k} == {user: "5"}


def test_torch_version_from_the_package_metadata():
    import importlib.metadata

    major, minor = launch.torch_version()
    assert importlib.metadata.version("torch").startswith(f"{major}.{minor}.")
    code = ("import sys, profkit.collectors.launch as l; l.launch_env('/r', ['x']); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr  # read without importing torch


GLOO_CHILD = """
import os, torch, torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
x = torch.ones(4)
dist.all_reduce(x)
dist.destroy_process_group()
print("ok", x.sum().item())
"""


def test_a_job_under_launch_gets_no_deprecation_warning(tmp_path):
    """The installed torch (2.13) warns on every rank when TORCH_NCCL_TRACE_BUFFER_SIZE is
    set; a gloo process group builds the same flight recorder on the CPU."""
    import socket

    pytest.importorskip("torch")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    base = {k: v for k, v in os.environ.items() if "BUFFER_SIZE" not in k} | {"PORT": port}
    old = base | {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000"}  # what launch set before
    new = launch_env(tmp_path / "run", ["x"], base)
    runs = [subprocess.run([sys.executable, "-c", GLOO_CHILD], env=e, capture_output=True,
                           text=True, timeout=120) for e in (old, new)]
    assert all(r.returncode == 0 and "ok 4.0" in r.stdout for r in runs), runs
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated" in runs[0].stderr  # the check sees it
    assert "deprecated" not in runs[1].stderr, runs[1].stderr


def test_killed_child_maps_to_128_plus_signal(tmp_path):
    cmd = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert launch_main(["--run-dir", str(tmp_path), "--", *cmd]) == 128 + 9


def test_errors(tmp_path):
    with pytest.raises(CollectorError, match="no command"):
        launch_main(["--run-dir", str(tmp_path), "--"])
    with pytest.raises(CollectorError, match="cannot run"):
        launch_main(["--run-dir", str(tmp_path), "--", str(tmp_path / "missing-binary")])


def test_module_entry_point(tmp_path):
    r = subprocess.run([sys.executable, "-m", "profkit.collectors.launch", "--run-dir",
                        str(tmp_path), "--", sys.executable, "-c", "raise SystemExit(5)"])
    assert r.returncode == 5
