"""The Hugging Face Trainer and Lightning runs captured with profkit's callbacks on 2 x H200
(samples/runs/frameworks, `bash samples/capture_frameworks.sh`): both ranks, NVML, NCCL logs,
flight recorder and run.json are there and read back, and the steps the callbacks marked are
the ones profiled (3 active steps after 1 wait and 1 warm-up)."""

from __future__ import annotations

import json

import pytest
from profkit.analyzers.executor import analyze_run

from profkit.run.loader import load_run
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs" / "frameworks"


@pytest.mark.parametrize("name", ["hf_trainer", "lightning_train"])
def test_framework_run_reads_back_whole(name):
    run = load_run(RUNS / name, cache=False)
    assert run.rank_ids == [0, 1] and run.skipped == []
    assert run.meta["status"] == "ok" and run.meta["world_size"] == 2
    for data in run.ranks.values():
        assert list(data.steps["step"]) == [2, 3, 4]  # one profiler step per optimizer step
        assert data.has_gpu and len(data.collectives) > 0
        assert {"sm_clock_mhz", "power_w"} <= set(data.counters["metric"].astype(str))
    assert not run.nccl["comms"].empty  # NCCL_DEBUG logs written through profkit launch
    assert not run.nccl["flight_recorder"].empty


@pytest.mark.parametrize("name", ["hf_trainer", "lightning_train"])
def test_framework_run_analyses_with_the_captured_step_time(name):
    """The profiled steps' time agrees with the sample's own CUDA-event timing of those
    same steps (SUMMARY.txt: step_ms[2:5], the recorded steps)."""
    measured = {}
    for line in (RUNS / "SUMMARY.txt").read_text().splitlines():
        key, _, payload = line.partition(" PROFKIT_SAMPLE ")
        measured[key] = json.loads(payload)
    recorded = sorted(measured[name]["step_ms"][2:5])[1]
    a = analyze_run(RUNS / name, cache=False, workers=1)
    step = a.table("rank_breakdown")["step_time_ms"].max()
    assert step == pytest.approx(recorded, rel=0.2)
    assert a.verdict["primary"] is not None
