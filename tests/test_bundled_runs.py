"""The runs captured on two H200 GPUs and shipped in samples/runs load, merge and agree with
the step times the sample scripts measured themselves with CUDA events."""

import gzip
import json
import re

import numpy as np
import pytest

from profkit import schema as S
from profkit.model import step_times_ns
from profkit.timeline.merge import merge_run
from tests.analysed import loaded
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"
ALL = sorted(p.parent for p in RUNS.rglob("run.json")) + [RUNS / "stock_ddp", RUNS / "stock_ddp_stack"]


def measured_ms() -> dict[str, float]:
    """median_step_ms each sample printed (CUDA events, rank 0), by workload name."""
    out = {}
    for line in (RUNS / "SUMMARY.txt").read_text().splitlines():
        name, _, payload = line.partition(" PROFKIT_SAMPLE ")
        out[name] = json.loads(payload)["median_step_ms"]
    return out


@pytest.mark.parametrize("run_dir", ALL, ids=lambda p: str(p.relative_to(RUNS)))
def test_bundled_run_loads_cleanly(run_dir, tmp_path):
    run = loaded(run_dir)
    assert run.skipped == [] and run.notes == []
    assert run.rank_ids == list(range(run.world_size))
    # the samples profile 3 active steps unless run.json says otherwise; the with-stack
    # capture (stock torch.profiler, no run.json) 10; parallel/pipeline_m16 was cut to its
    # last profiled step to stay under 2 MB a file (samples/runs/README.md)
    active = (run.meta.get("profiler") or {}).get("active", 3)
    expected = {"stock_ddp_stack": 10, "pipeline_m16": 1}.get(run_dir.name, active)
    for data in run.ranks.values():
        assert len(data.steps) == expected
        assert data.has_gpu


def test_stock_ddp_sample(tmp_path):
    run = loaded(RUNS / "stock_ddp")
    assert {d.rank_source for d in run.ranks.values()} == {"distributedInfo"}
    for data in run.ranks.values():
        coll = data.collectives
        assert set(coll[S.COLL_NAME].astype(str)) == {"all_reduce"}
        assert (coll[S.GROUP_SIZE] == 2).all() and (coll[S.MSG_BYTES] > 0).all()
        assert set(data.gpu_events[S.SUBCLASS].astype(str)) >= {"gemm", "attention", "all_reduce"}
    out = tmp_path / "m.json.gz"
    report = merge_run(run, out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    names = [e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"]
    assert any(n.startswith("rank 0") and "GPU 0" in n for n in names)
    assert any(n.startswith("rank 1") and "GPU 1" in n for n in names)
    # one name per Perfetto process: the trace's pid -1 (events of no process) is not a
    # second "rank 0 · CPU"
    assert len(names) == len(set(names)), sorted(names)
    assert "rank 0 · CPU" in names and "rank 0 · no process" in names
    assert report.events_written == len(doc["traceEvents"])


WORKLOADS = {"stock_ddp": "stock_ddp", "profkit_ddp": "profkit_ddp", "profkit_fsdp": "profkit_fsdp",
             "zoo_compute": "zoo/compute", "zoo_communication": "zoo/communication",
             "zoo_data_loading": "zoo/data_loading", "zoo_host_sync": "zoo/host_sync",
             "zoo_straggler": "zoo/straggler", "zoo_balanced": "zoo/balanced",
             "zoo_cpu_launch": "zoo/cpu_launch", "infer_kv": "infer_kv"}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_step_time_agrees_with_cuda_events(name):
    """Step time from the trace vs the script's own CUDA-event timing of the same steps' run
    (a median over all but the first step, so the profiled steps are a subset): within 15%."""
    run = loaded(RUNS / WORKLOADS[name])
    ours = np.median(step_times_ns(run.ranks[0].steps)) / 1e6
    assert ours == pytest.approx(measured_ms()[name], rel=0.15)


def test_profkit_run_has_counters_and_nccl_tables():
    run = loaded(RUNS / "profkit_ddp")
    assert run.meta["status"] == "ok" and run.meta["world_size"] == 2
    assert re.match(r"NVIDIA H200", run.meta["gpus"][0]["name"])
    for data in run.ranks.values():
        metrics = set(data.counters[S.METRIC].astype(str))
        assert {"sm_clock_mhz", "power_w", "gpm_tensor_active_pct"} <= metrics
        assert data.counters[S.TS_NS].between(data.events[S.TS_NS].min() - 10**10,
                                             data.events[S.TS_NS].max() + 10**10).all()
    assert len(run.nccl["tuning"]) > 0 and len(run.nccl["flight_recorder"]) > 0


def test_merged_profkit_run_shows_nvml_tracks_beside_each_gpu(tmp_path):
    out = tmp_path / "m.json.gz"
    merge_run(loaded(RUNS / "profkit_ddp"), out)
    events = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    kernel_pids = {e["pid"] for e in events if e.get("cat") == "kernel"}
    for rank in (0, 1):
        (gpu_pid,) = [p for p in kernel_pids if names[p].startswith(f"rank {rank} ")]
        metrics = {e["name"] for e in events if e["ph"] == "C" and e["pid"] == gpu_pid}
        assert {"sm_clock_mhz", "power_w", "gpm_sm_active_pct"} <= metrics
