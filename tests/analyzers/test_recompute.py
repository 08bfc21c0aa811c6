"""Activation recompute on a hand-built trace whose every number is worked out below, and
on the H200 captures of a GPT with torch.utils.checkpoint on every block (labelled by a
record_function range around the recomputation, which profkit does not read)."""


import gzip
import json

import numpy as np
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.recompute import recompute_regions

from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.factories import kernel, launch, memory_event, step, trace_doc, write_trace, x
from tests.realruns import sample_labels

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 80 * 10**9}
LINEAR = {"Input Dims": [[64, 1024], [1024, 1024], [1024]], "Input type": ["c10::BFloat16"] * 3}
MM = {"Input Dims": [[64, 1024], [1024, 1024]], "Input type": ["c10::BFloat16"] * 2}
F = 2 * 64 * 1024 * 1024  # FLOPs of each GEMM above
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32"
BW = 200  # the autograd engine's thread


def checkpointed_step():
    """One step [0, 1000) us. Forward on thread 100: aten::linear launching a 400 us GEMM.
    Backward on thread 200: MmBackward0's evaluate_function range [400, 700) first runs the
    block's forward again (aten::linear 50 us kernel, aten::add 10 us, aten::gelu 20 us:
    the region [410, 450)), then its own aten::mm (100 us); NativeLayerNormBackward0 runs
    its backward op (360 us). Kernel time 940 us, of it recompute 80 us (8.5%, 8% of the
    step); FLOPs executed 3F, recomputed F. Memory: 1 GB allocated before the region, 1.8 GB
    after it (0.8 GB of activations; peak allocated 2 GB, so 2.8 GB without checkpointing),
    3 GB reserved, on an 80 GB device."""
    return [
        step(1, 0.0, 1000.0),
        memory_event(5.0, 10**9, 10**9, 3 * 10**9),
        x("aten::linear", "cpu_op", 10.0, 20.0, **LINEAR), launch(12.0, 1.0, 1),
        kernel(GEMM, 20.0, 400.0, 1),
        x("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 400.0, 300.0, tid=BW),
        x("aten::linear", "cpu_op", 410.0, 20.0, tid=BW, **LINEAR), launch(412.0, 1.0, 2, BW),
        kernel(GEMM, 420.0, 50.0, 2),
        memory_event(415.0, 10**9, 2 * 10**9, 3 * 10**9, tid=BW),
        x("aten::add", "cpu_op", 432.0, 4.0, tid=BW), launch(433.0, 1.0, 3, BW),
        kernel("vectorized_elementwise_kernel<add>", 470.0, 10.0, 3),
        x("aten::gelu", "cpu_op", 440.0, 10.0, tid=BW), launch(441.0, 1.0, 4, BW),
        kernel("vectorized_elementwise_kernel<gelu>", 480.0, 20.0, 4),
        memory_event(445.0, -2 * 10**8, 18 * 10**8, 3 * 10**9, tid=BW),
        x("MmBackward0", "cpu_op", 460.0, 230.0, tid=BW),
        x("aten::mm", "cpu_op", 470.0, 10.0, tid=BW, **MM), launch(472.0, 1.0, 5, BW),
        kernel(GEMM, 500.0, 100.0, 5),
        x("autograd::engine::evaluate_function: NativeLayerNormBackward0", "cpu_op", 700.0,
          100.0, tid=BW),
        x("aten::native_layer_norm_backward", "cpu_op", 710.0, 10.0, tid=BW),
        launch(712.0, 1.0, 6, BW), kernel("layer_norm_grad_input_kernel", 640.0, 360.0, 6),
    ]


def test_recompute_time_flops_and_memory_on_a_hand_built_step(tmp_path):
    doc = trace_doc(rank=0, world_size=1, events=checkpointed_step(), deviceProperties=[H100])
    run = load_run(write_trace(tmp_path / "rank0.json", doc), cache=False)
    regions = recompute_regions(run.ranks[0])
    assert len(regions) == 1 and regions.iloc[0]["tid"] == BW
    a = analyze(run)
    row = a.table("recompute").iloc[0]
    assert row["recompute_ns"] == 80_000 and row["kernel_ns"] == 940_000
    assert row["gpu_frac"] == pytest.approx(80 / 940) and row["step_frac"] == pytest.approx(0.08)
    assert row["recompute_flops"] == F and row["executed_flops"] == 3 * F
    assert row["activation_bytes"] == pytest.approx(0.8e9)
    assert row["peak_without_bytes"] == pytest.approx(2.8e9) and row["fits_without"]
    eff = a.table("efficiency").iloc[0]
    assert eff["flops"] == 2 * F and eff["recompute_flops"] == F  # MFU: the model's FLOPs
    assert eff["hfu"] / eff["mfu"] == pytest.approx(1.5)
    found = [f for f in a.findings if f.category == "recompute"]
    assert len(found) == 1 and "8.5% of GPU time" in found[0].message
    assert "would save ~8" in found[0].recommendation and "which fits" in found[0].recommendation


def test_backward_ops_alone_are_no_recompute(tmp_path):
    """The same step without the recomputed forward ops: nothing is recompute."""
    events = [e for e in checkpointed_step()
              if not (e.get("tid") == BW and e["name"] in ("aten::linear", "aten::add", "aten::gelu"))]
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=[H100])
    run = load_run(write_trace(tmp_path / "rank0.json", doc), cache=False)
    assert recompute_regions(run.ranks[0]).empty
    a = analyze(run)
    assert a.table("recompute").empty and not [f for f in a.findings if f.category == "recompute"]


@pytest.mark.parametrize("name", ["why/gpt_b32", "memory/gpt_b64", "zoo/compute"])
def test_runs_without_checkpointing_have_no_recompute(name):
    assert recompute_regions(load_run(REPO / "samples" / "runs" / name).ranks[0]).empty


# --- H200 captures: a 4-block GPT (batch 32, seq 512), torch.utils.checkpoint (non-reentrant)
# on every block vs none; the workload wraps the recomputation in record_function
# ("label/recompute") and prints FlopCounterMode's executed and model FLOPs (SUMMARY.txt).
MEMORY = REPO / "samples" / "runs" / "memory"


def summary(name: str) -> dict:
    """The workload's own numbers for one capture (its SUMMARY.txt line)."""
    for fields in sample_labels(MEMORY / "SUMMARY.txt").values():
        if str(fields.get("out", "")).endswith("/" + name):
            return fields
    raise LookupError(name)


def label_share(run_dir) -> float:
    """From the raw trace JSON, without profkit: the kernel time launched inside the
    workload's 'label/recompute' ranges (same thread) over all kernel time launched inside
    ProfilerStep ranges."""
    path = next(run_dir.rglob("*.pt.trace.json.gz"))
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["name"].startswith("ProfilerStep#")]
    labels = [(e["tid"], e["ts"], e["ts"] + e["dur"]) for e in events
              if e["name"] == "label/recompute"]
    launch = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in events
              if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    total = recomputed = 0.0
    for k in (e for e in events if e.get("cat") == "kernel"):
        tid, ts = launch.get(k["args"].get("correlation"), (None, None))
        if ts is None or not any(a <= ts <= b for a, b in steps):
            continue
        total += k["dur"]
        recomputed += k["dur"] * any(t == tid and a <= ts <= b for t, a, b in labels)
    return recomputed / total


def test_h200_checkpointed_gpt_recompute_share_flops_and_saving():
    on, off = MEMORY / "ckpt_on", MEMORY / "ckpt_off"
    a = analyze(load_run(on))
    row = a.table("recompute").iloc[0]
    label = label_share(on)  # 0.156 of the kernel time
    assert 0.10 < label < 0.25 and abs(row["gpu_frac"] - label) <= 0.15
    assert row["gpu_frac"] == pytest.approx(label, abs=0.01)  # measured: 0.1565 vs 0.1565
    assert row["regions"] == 4  # one forward of each checkpointed block, per step
    eff = a.table("efficiency").iloc[0]
    assert 0 < eff["mfu"] < eff["hfu"] <= 1
    # FlopCounterMode: executed 7.49, model 6.25 TFLOP per step (1.198x); the trace: 1.194x
    # (the recompute stops inside each block's last linear, after its weight cast and before
    # its GEMM: those linears count no FLOPs)
    s = summary("ckpt_on")
    assert eff["hfu"] / eff["mfu"] == pytest.approx(
        s["executed_flops_per_step"] / s["model_flops_per_step"], rel=0.02)
    assert eff["flops"] / eff["steps"] == pytest.approx(s["model_flops_per_step"], rel=0.06)
    found = [f for f in a.findings if f.category == "recompute"]
    assert len(found) == 1 and "which fits" in found[0].recommendation
    # the fix measured: checkpointing off, the unprofiled steps (the last two of each run)
    on_ms, off_ms = np.median(s["step_ms"][-2:]), np.median(summary("ckpt_off")["step_ms"][-2:])
    measured = 1 - off_ms / on_ms  # 0.175; estimated 0.196 (GPU time 3.07 + idle 3.48 ms)
    assert abs(found[0].estimated_saving["fraction"] - measured) <= 0.15
    # the peak without checkpointing (3.04 GB allocated + 2.52 GB of recomputed activations)
    # within 15% of the run without it (5.30 GB)
    assert row["peak_without_bytes"] == pytest.approx(
        max(summary("ckpt_off")["peak_allocated_bytes"]), rel=0.15)
    b = analyze(load_run(off))
    assert b.table("recompute").empty
    e = b.table("efficiency").iloc[0]
    assert e["hfu"] == e["mfu"] <= 1 and e["recompute_flops"] == 0


def test_reentrant_checkpoint_forward_inside_checkpoint_function_backward(tmp_path):
    """Reentrant checkpoint (torch.utils.checkpoint(use_reentrant=True), DeepSpeed,
    Megatron): CheckpointFunctionBackward [400, 900) runs the block's forward (linear 50 us
    and gelu 20 us kernels: the region [410, 440)) then a nested backward whose aten::mm
    (100 us) is no recompute. Recompute 70 of 170 us of kernel time."""
    events = [
        step(1, 0.0, 1000.0),
        x("autograd::engine::evaluate_function: CheckpointFunctionBackward", "cpu_op", 400.0,
          500.0, tid=BW),
        x("CheckpointFunctionBackward", "cpu_op", 401.0, 498.0, tid=BW),
        x("aten::linear", "cpu_op", 410.0, 20.0, tid=BW, **LINEAR), launch(412.0, 1.0, 1, BW),
        kernel(GEMM, 420.0, 50.0, 1),
        x("aten::gelu", "cpu_op", 432.0, 8.0, tid=BW), launch(433.0, 1.0, 2, BW),
        kernel("vectorized_elementwise_kernel<gelu>", 470.0, 20.0, 2),
        x("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 450.0, 150.0, tid=BW),
        x("MmBackward0", "cpu_op", 451.0, 148.0, tid=BW),
        x("aten::mm", "cpu_op", 460.0, 10.0, tid=BW, **MM), launch(462.0, 1.0, 3, BW),
        kernel(GEMM, 500.0, 100.0, 3),
    ]
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=[H100])
    run = load_run(write_trace(tmp_path / "rank0.json", doc), cache=False)
    regions = recompute_regions(run.ranks[0])
    assert len(regions) == 1
    assert regions.iloc[0]["end_ns"] - regions.iloc[0]["start_ns"] == 30_000
    row = analyze(run).table("recompute").iloc[0]
    assert row["recompute_ns"] == 70_000 and row["kernel_ns"] == 170_000
    assert row["recompute_flops"] == F
