"""Helpers of the framework-integration tests: run a script (a sample or a test job) in a
subprocess on CPU, and read the run directory it wrote."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2")


def needs(module: str):
    """Skip unless ``module`` is installed (found without importing it: importing
    transformers or lightning costs seconds)."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install -e '.[test]')")


def run_job(cmd: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                        "PROFKIT_RUN_DIR")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1",
               PYTHONUNBUFFERED="1")
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def sample(script: str, out: Path, *extra: str) -> list[str]:
    return [str(SAMPLES / script), "--tiny", "--device", "cpu", "--steps", "8",
            "--out", str(out), *extra]


def rank_status(run: Path, rank: int) -> dict:
    return json.loads((run / "ranks" / f"rank{rank}.json").read_text())


def check_run(run: Path, world_size: int, steps: int = 8) -> None:
    """run.json and every rank's status say ok, each rank wrote its trace, and load_run
    reads the active steps (the samples' schedule: wait 1, warmup 1, active 3)."""
    from profkit.run.loader import load_run

    doc = json.loads((run / "run.json").read_text())
    assert (doc["status"], doc["world_size"]) == ("ok", world_size)
    for rank in range(world_size):
        status = rank_status(run, rank)
        assert (status["status"], status["steps"]) == ("ok", steps), status
        assert status["traces"] == [f"rank{rank}.pt.trace.json.gz"]
    loaded = load_run(run, cache=False)
    assert sorted(loaded.ranks) == list(range(world_size))
    for rank in loaded.ranks.values():
        assert rank.steps["step"].tolist() == [2, 3, 4]
