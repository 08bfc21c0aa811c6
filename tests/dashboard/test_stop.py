"""A stopped command leaves no process behind: `profkit dashboard` (and `profkit analyze`)
as real subprocesses, stopped while their worker processes parse traces, are gone with
every worker (and the dashboard's forkserver) within a few seconds (systemd's and docker's
SIGTERM, Ctrl-C's SIGINT, and SIGKILL, which no handler sees: the workers die with their
parent)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from profkit import children
from tests.dashboard.conftest import REPO, free_port

# the largest bundled run: its traces are parsed in a pool of worker processes
BIG_RUN = REPO / "samples" / "runs" / "stock_ddp_stack"
STOPPED_WITHIN_S = 3.0  # measured: 0.1-0.8 s on a 2-core machine


def live_processes_with(marker: str) -> list[int]:
    """Pids of the processes (not zombies) whose command line holds ``marker``: the
    command and the workers it forked (they keep its command line)."""
    return [pid for pid in _pids() if marker.encode() in _cmdline(pid) and _alive(pid)]


def workers_of(pid: int, marker: str) -> list[int]:
    """The live worker processes below ``pid``: forked by it (they keep its command line,
    which holds ``marker``) or by the forkserver it started (the dashboard's)."""
    parents = _parent_map()
    below = children.descendants(pid)
    servers = {p for p in below if parents.get(p) == pid
               and b"multiprocessing.forkserver" in _cmdline(p)}
    return [p for p in below if _alive(p)
            and (parents.get(p) in servers or marker.encode() in _cmdline(p))]


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] != "Z"


def _parent_map() -> dict[int, int]:
    out = {}
    for pid in _pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        out[pid] = int(stat[stat.rfind(")") + 2:].split()[1])
    return out


@pytest.fixture
def run_copy(tmp_path) -> Path:
    """A copy of :data:`BIG_RUN` without its caches, so that it is parsed again."""
    if not BIG_RUN.is_dir():
        pytest.skip("the bundled sample runs are absent")
    return Path(shutil.copytree(BIG_RUN, tmp_path / "stop-me",
                                ignore=shutil.ignore_patterns(".profkit")))


def start_and_stop(cmd: list[str], marker: str, signum: int, log: Path) -> float:
    """Start ``cmd``, wait until it has worker processes, send ``signum``; the seconds
    until it and every process it started are gone."""
    with log.open("wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log_file)
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while not workers_of(proc.pid, marker):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no worker process was started"
            time.sleep(0.05)
        started = set(children.descendants(proc.pid))  # workers, and any server of theirs
        start = time.monotonic()
        proc.send_signal(signum)
        proc.wait(timeout=30)
        while [p for p in started if _alive(p)] and time.monotonic() - start < 30:
            time.sleep(0.02)
        took_s = time.monotonic() - start
        left = [p for p in started if _alive(p)] + live_processes_with(marker)
        assert not left, f"left running after {signum!r}: {left} (started {started})"
        assert proc.returncode == -signum  # ended by the signal, as a shell expects
        return took_s
    finally:  # never leave one behind, even on failure
        for pid in [p for p in started if _alive(p)] + live_processes_with(marker):
            subprocess.run(["kill", "-9", str(pid)], check=False)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_stopped_dashboard_ends_its_workers(run_copy, tmp_path, signum):
    port = free_port()
    cmd = [sys.executable, "-m", "profkit", "dashboard", str(run_copy), "--port", str(port)]
    took_s = start_and_stop(cmd, str(run_copy), signum, tmp_path / "dashboard.log")
    assert took_s < STOPPED_WITHIN_S


def test_a_stopped_analysis_ends_its_workers(run_copy, tmp_path):
    cmd = [sys.executable, "-m", "profkit", "analyze", "--no-cache", "--workers", "2",
           str(run_copy)]
    took_s = start_and_stop(cmd, str(run_copy), signal.SIGTERM, tmp_path / "analyze.log")
    assert took_s < STOPPED_WITHIN_S
