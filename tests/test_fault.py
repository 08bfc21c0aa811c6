"""Kill ``profkit merge`` and ``profkit analyze`` with SIGKILL at random moments, then run
them again: the next run's output equals a clean run's, no temporary is left, and no cache
entry the killed run half wrote is ever served.

The moments are drawn from ``PROFKIT_FAULT_SEED`` (printed on failure) so that a failure can
be replayed; by default a new seed each run, since every moment must pass."""

from __future__ import annotations

import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"
QUICK, FULL = RUNS / "zoo" / "compute", RUNS / "stock_ddp"  # real 2-rank captures, small and larger
SEED = int(os.environ.get("PROFKIT_FAULT_SEED", random.SystemRandom().randrange(2**32)))


@dataclass
class Command:
    name: str
    args: list[str]  # after the run path
    output: str

    def argv(self, run: Path, out: Path) -> list[str]:
        return [sys.executable, "-m", "profkit", self.name, str(run), *self.args,
                "-o", str(out / self.output)]


COMMANDS = {
    "merge": Command("merge", ["-q"], "merged.json.gz"),
    "analyze": Command("analyze", ["--format", "json"], "report.json"),
}


def content(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


def run_to_end(argv: list[str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no warning, no traceback
    return time.monotonic() - start


def kill_when(argv: list[str], due, timeout_s: float = 300) -> None:
    """Start ``argv`` and SIGKILL it (and anything it started) as soon as ``due()`` says so;
    ``due`` is asked every millisecond until the command ends."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if due():
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.001)
    proc.wait()  # reaped: as after a real kill, its process id is gone


@dataclass
class Clean:
    root: Path  # holding run/ (a copy of RUN) and out/; the report names the run's path
    outputs: dict[str, tuple[bytes, float]]  # by command: output, seconds it took


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A function giving, for a bundled run, each command's output and duration on a fresh
    copy with a cold cache (once per run)."""
    done: dict[Path, Clean] = {}

    def make(source: Path) -> Clean:
        if source not in done:
            root = tmp_path_factory.mktemp("fault")
            shutil.copytree(source, root / "run")
            (root / "out").mkdir()
            outputs = {}
            for name, cmd in COMMANDS.items():
                seconds = run_to_end(cmd.argv(root / "run", root / "out"))
                outputs[name] = (content(root / "out" / cmd.output), seconds)
            done[source] = Clean(root, outputs)
        return done[source]
    return make


def temporaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".tmp-*"))


def moments(clean: Clean, name: str, random_count: int) -> list[tuple[str, object]]:
    """(what, due) pairs: ``random_count`` random moments, one in each equal slice of the clean
    run's duration past its first fifth (Python starting up), then the moments a temporary
    first appears in the cache and beside the output: a kill in the middle of a write."""
    seconds = clean.outputs[name][1]
    rng = random.Random(f"{SEED}-{name}")
    out = []
    for i in range(random_count):
        lo, hi = 0.2 + 0.8 * i / random_count, 0.2 + 0.8 * (i + 1) / random_count
        after_s = seconds * rng.uniform(lo, hi)
        out.append((f"after {after_s:.2f}s of {seconds:.2f}s", after_s))
    for folder in (clean.root / "run" / ".profkit" / "cache", clean.root / "out"):
        out.append((f"while writing in {folder.name}/", folder))
    return out


def _due(when):
    """``due()`` for a delay in seconds, or for a folder: a temporary is in it."""
    if isinstance(when, float):
        start = time.monotonic()
        return lambda: time.monotonic() - start >= when
    return lambda: any(n.startswith(".tmp-") for n in os.listdir(when)) if when.exists() else False


def kill_and_rerun(clean: Clean, name: str, random_count: int, twice: bool = False) -> None:
    cmd, expected = COMMANDS[name], clean.outputs[name][0]
    run, out = clean.root / "run", clean.root / "out"
    target = out / cmd.output
    for what, when in moments(clean, name, random_count):
        where = f"{name} killed {what} (PROFKIT_FAULT_SEED={SEED})"
        shutil.rmtree(run / ".profkit", ignore_errors=True)  # every killed run starts cold
        target.unlink(missing_ok=True)
        kill_when(cmd.argv(run, out), _due(when))
        if target.exists():  # finished, or renamed into place before the kill: never half
            assert content(target) == expected, where
        for _ in range(2 if twice else 1):  # the second run reads what the first cached
            run_to_end(cmd.argv(run, out))
            assert content(target) == expected, where
            assert temporaries(clean.root) == [], where


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_killed_command_leaves_nothing_wrong(clean, name):
    kill_and_rerun(clean(QUICK), name, random_count=2)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_killed_command_leaves_nothing_wrong_many_moments(clean, name):
    kill_and_rerun(clean(FULL), name, random_count=15, twice=True)
