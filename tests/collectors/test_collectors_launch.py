"""profkit launch: environment passed to the child and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from profkit.collectors import CollectorError, launch_main
from profkit.collectors.launch import launch_env

KEYS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE", "PROFKIT_RUN_DIR",
        "PROFKIT_LAUNCH_COMMAND")
CHILD = ("import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[2:]}, "
         "open(sys.argv[1], 'w')); sys.exit(7)")


def test_child_env_and_exit_code(tmp_path, monkeypatch):
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    monkeypatch.setenv("NCCL_DEBUG_SUBSYS", "INIT")  # the user's choice is kept
    out, run = tmp_path / "env.json", tmp_path / "run"
    cmd = [sys.executable, "-c", CHILD, str(out), *KEYS]
    assert launch_main(["--run-dir", str(run), "--", *cmd]) == 7
    env = json.loads(out.read_text())
    run = run.resolve()
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT"
    assert env["NCCL_DEBUG_FILE"] == str(run / "nccl" / "rank.%h.%p.log")
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
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
