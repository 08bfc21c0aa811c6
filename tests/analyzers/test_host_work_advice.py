"""DataLoader advice only where the host prepares the step's input (issue 40, item 7c).

Host work before a step's first GPU op is input preparation, which a DataLoader's workers can
take over; host work among the step's launches (Python, dispatch, autograd, the optimizer, a
sleep in a named range) is not, and the finding names what the host did instead. Each case is
checked against the raw trace JSON (where the step's first GPU op starts, which ranges hold
the host time) and the workload's own labels (SUMMARY.txt), never against profkit's output.

- samples/runs/why/preprocess: zoo/preprocess.py, num_workers=0, 51.3 ms of host
  preprocessing per batch (``host_preprocess_ms``); its fix (12 workers) took the step from
  65.1 to 6.4 ms: DataLoader advice, rightly.
- tests/data/public/tracelens_h100_timesformer: 218 ms of video preprocessing before the
  step's first GPU event.
- samples/runs/why/gpt_4l: a GPT trained on a batch made on the GPU, no DataLoader; launch-
  and dispatcher-bound: no DataLoader advice.
- samples/runs/parallel/tp_mlp: a 2-rank tensor-parallel MLP (DTensor) on a batch made on the
  GPU, no DataLoader: host bound under DTensor dispatch, 68% host work on rank 0.
- samples/runs/parallel/mesh2x2_hostbound: rank 3 sleeps 30 ms per step in a ``host_work``
  range: named, not DataLoader advice.
- samples/runs/why/cpu_optimizer: Adam on CPU tensors after reading the gradients back: a
  round trip, with its own advice (a GPU optimizer).
"""

from __future__ import annotations

import json
import re

import pytest

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc

RUNS = REPO / "samples" / "runs"
PUBLIC = REPO / "tests" / "data" / "public"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LOADER = re.compile(r"DataLoader|num_workers")


def raw(run, rank: int = 0) -> list[dict]:
    traces = sorted(run.rglob("*.json.gz"))
    trace = traces[rank] if len(traces) > 1 else traces[0]
    return [e for e in read_doc(trace)["traceEvents"] if e.get("ph") == "X"]


def first_ops(ev: list[dict]) -> list[tuple[float, str]]:
    """Per ProfilerStep: (ms from its start to the first call whose correlation id has a GPU
    event, that GPU event's name): when and how the step's GPU work began."""
    gpu = {e["args"].get("correlation"): e["name"] for e in ev if e.get("cat") in GPU_CATS}
    calls = sorted((e["ts"], gpu[e["args"]["correlation"]]) for e in ev
                   if e.get("cat") == "cuda_runtime"
                   and e.get("args", {}).get("correlation") in gpu)
    steps = sorted(e["ts"] for e in ev if e["name"].startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation")
    out = []
    for s in steps:
        t, name = min(c for c in calls if c[0] >= s)
        out.append(((t - s) / 1e3, name))
    return out


def heads_ms(ev: list[dict]) -> list[float]:
    return [ms for ms, _ in first_ops(ev)]


def summary(path, key: str) -> dict:
    for line in path.read_text().splitlines():
        if line.startswith(key + " "):
            return json.loads(line.split("PROFKIT_SAMPLE ", 1)[1])
    raise KeyError(key)


def host_work(run, rank: int = 0):
    (f,) = [f for f in analysed(run).findings if f.category == "host_work" and f.rank == rank]
    return f


def loader_advice(run) -> list[str]:
    return [f.category for f in analysed(run).findings
            if LOADER.search(f.recommendation + f.message)]


def test_preprocessing_before_the_first_op_gets_dataloader_advice():
    run = RUNS / "why" / "preprocess"
    label = summary(RUNS / "why" / "SUMMARY.txt", "why_preprocess")
    fixed = summary(RUNS / "why" / "SUMMARY.txt", "why_preprocess_fixed")
    assert label["workers"] == 0 and fixed["workers"] > 0
    assert fixed["median_step_ms"] < 0.2 * label["median_step_ms"]  # the workers fixed it
    ev = raw(run)
    assert not [e for e in ev if "DataLoader" in e["name"]]  # no loader: prepared in the loop
    heads = heads_ms(ev)
    # independently: each step waits ~the workload's host preprocessing before its first op,
    # and that op copies the batch to the GPU
    assert sorted(heads)[len(heads) // 2] > 0.7 * label["host_preprocess_ms"]
    assert all("HtoD" in name for _, name in first_ops(ev))
    f = host_work(run)
    assert f.evidence["host_work_kind"] == "input"
    assert f.evidence["host_work_shares"]["input"] > 0.8
    assert "num_workers>0" in f.recommendation
    assert "_upsample_bilinear2d_aa" in f.recommendation  # what the host did, named


def test_video_preprocessing_before_the_first_op_gets_dataloader_advice():
    run = PUBLIC / "tracelens_h100_timesformer"
    ((head, op),) = first_ops(raw(run))
    assert head > 200 and "HtoD" in op  # 218 ms, then the frames are copied to the GPU
    f = host_work(run)
    assert f.evidence["host_work_kind"] == "input"
    assert "num_workers>0" in f.recommendation and "normalize" in f.recommendation


def test_a_dispatcher_bound_loop_gets_no_dataloader_advice():
    run = RUNS / "why" / "gpt_4l"
    ev = raw(run)
    assert not [e for e in ev if "DataLoader" in e["name"]]
    heads = heads_ms(ev)
    assert max(heads) < 1.0  # each step launches within 1 ms of its start
    f = host_work(run)
    assert f.evidence["host_work_kind"] == "between_launches"
    assert f.evidence["host_work_shares"]["input"] + \
        f.evidence["host_work_shares"]["before_first_op"] < 0.1
    assert "torch.compile" in f.recommendation and "Python between recorded ops" in f.recommendation
    assert loader_advice(run) == []


def test_dtensor_dispatch_gets_no_dataloader_advice():
    run = RUNS / "parallel" / "tp_mlp"
    ev = raw(run, rank=0)
    assert not [e for e in ev if "DataLoader" in e["name"]]
    assert max(heads_ms(ev)) < 1.0
    # independently: the host runs DTensor's dispatch (PythonSubclass / Redistribute ranges)
    subclass = sum(e["dur"] for e in ev if e["name"] in ("PythonSubclass", "Redistribute"))
    assert subclass > 1000  # us over the trace
    f = host_work(run)
    assert f.evidence["host_work_kind"] == "between_launches"
    assert "PythonSubclass" in f.recommendation and "DTensor" in f.recommendation
    assert loader_advice(run) == []


def test_a_sleep_in_a_named_range_is_named_not_given_dataloader_advice():
    run = RUNS / "parallel" / "mesh2x2_hostbound"
    ev = raw(run, rank=3)
    sleeps = [e for e in ev if e["name"].endswith("host_work") and e.get("cat") == "user_annotation"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
    # independently: the 30 ms sleep opens each step, before its first GPU op
    assert len(sleeps) == len(steps) and all(28_000 < e["dur"] < 40_000 for e in sleeps)
    assert min(heads_ms(ev)) > 28
    assert not [name for _, name in first_ops(ev) if "Memcpy" in name]  # it opens with a kernel
    f = host_work(run, rank=3)
    assert f.evidence["host_work_kind"] == "named_ranges"
    assert "profkit/host_work" in f.recommendation
    assert loader_advice(run) == []


def test_a_cpu_optimizer_keeps_its_round_trip_story_without_dataloader_advice():
    run = RUNS / "why" / "cpu_optimizer"
    label = summary(RUNS / "why" / "SUMMARY.txt", "why_cpu_optimizer")
    assert label["optimizer"] == "adam-cpu-offload"  # the gradients read back, Adam on the CPU
    f = host_work(run)
    assert f.evidence["after_sync_share"] > 0.5  # a round trip: its own advice
    assert "GPU optimizer" in f.recommendation and "Optimizer.step#Adam" in f.evidence["code"]
    # independently: Adam's host time, from the raw trace, is most of the host work charged
    ev = raw(run)
    adam_ms = sum(e["dur"] for e in ev if e["name"].startswith("Optimizer.step#")
                  and e.get("cat") == "user_annotation") / 1e3 / len(heads_ms(ev))
    assert adam_ms > 0.8 * label["host_cpu_adam_ms"]
    assert f.evidence["host_work_kind"] == "optimizer"
    assert f.evidence["host_work_shares"]["optimizer"] > 0.9
    assert loader_advice(run) == []


@pytest.mark.parametrize("run", [RUNS / "parallel" / "tp_mlp", RUNS / "layout" / "mesh",
                                 RUNS / "diagnosis" / "transfer_pageable",
                                 RUNS / "zoo" / "host_sync", RUNS / "why" / "graph_hooks"])
def test_no_dataloader_advice_without_a_dataloader_or_input_preparation(run):
    ev = [e for tr in sorted(run.rglob("*.json.gz")) for e in read_doc(tr)["traceEvents"]]
    assert not [e for e in ev if "DataLoader" in str(e.get("name", ""))]
    assert loader_advice(run) == []


def test_work_before_a_first_kernel_is_not_called_input_preparation():
    """An unnamed sleep or Python at the step's start, then a kernel (no input copied): the
    advice names it, without DataLoader workers (the split as measure/hostwork.py gives it)."""
    import pandas as pd
    from profkit.analyzers.findings.hostwork import host_work_evidence

    where = pd.DataFrame([{"rank": 0, "host_work_ns": 100, "head_ns": 90, "input_ns": 0,
                           "optimizer_ns": 0, "annotated_ns": 0},
                          {"rank": 1, "host_work_ns": 100, "head_ns": 90, "input_ns": 80,
                           "optimizer_ns": 0, "annotated_ns": 0}])
    ev0, advice0 = host_work_evidence(0, where, None, 1)
    ev1, advice1 = host_work_evidence(1, where, None, 1)
    assert ev0["host_work_kind"] == "before_first_op" and not LOADER.search(advice0)
    assert "(90% of this host work)" in advice0
    assert ev1["host_work_kind"] == "input" and "num_workers>0" in advice1
