"""Findings about how well a rank uses its GPU: low MFU, GEMMs off the tensor cores, a
throttled clock, memory near capacity, and why MFU was not judged. Each reads a measurement
of :mod:`profkit.analyzers.measure.efficiency` (its rows as facts)."""

from __future__ import annotations

import numpy as np
from profkit.analyzers.measure.tables import RANK, plain
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

from profkit.textout import ranks_text


def judge_efficiency(result: Result, th: Thresholds) -> list[Finding]:
    """Per-rank efficiency findings, then NVML findings, then the MFU notes."""
    effs, nvml = result.facts["efficiency_rows"], result.facts["nvml_rows"]
    out = [f for eff in effs for f in efficiency_findings(eff, th)]
    out += [f for row in nvml for f in nvml_findings(row, th)]
    return out + mfu_notes(effs, th)


def efficiency_findings(eff: dict, th: Thresholds) -> list[Finding]:
    out, rank = [], eff[RANK]
    ev = {k: plain(v) for k, v in eff.items()}
    if eff["mfu"] < th.low_mfu_frac:
        peak = "given" if th.peak_tflops else f"{eff['precision_mix']} on {eff['device_model']}"
        out.append(Finding(
            category="mfu", severity="warning", rank=rank, evidence=ev,
            message=f"MFU is {eff['mfu']:.0%}: {eff['achieved_tflops']:.0f} of "
                    f"{eff['peak_tflops']:.0f} dense TFLOP/s ({peak}).",
            recommendation="Find where the step goes (breakdown, kernels): raise arithmetic "
                           "intensity (larger batch / sequence, bf16), fuse small ops, "
                           "overlap communication."))
    if eff["gemm_time_ns"] and eff["tensor_core_gemm_frac"] == 0 and eff["fp32_gemm_ns"]:
        out.append(Finding(
            category="precision", severity="warning", rank=rank, evidence=ev,
            message=f"No GEMM runs on tensor cores; fp32 GEMMs take "
                    f"{eff['fp32_gemm_ns'] / 1e6:.1f} ms.",
            recommendation="Use mixed precision: torch.autocast(dtype=torch.bfloat16) (or "
                           "fp16 with a GradScaler), or at least TF32 via "
                           "torch.backends.cuda.matmul.allow_tf32 = True."))
    return out


def nvml_findings(row: dict, th: Thresholds) -> list[Finding]:
    out, rank = [], row[RANK]
    ev = {k: plain(v) for k, v in row.items()}
    if row["throttle_samples"]:
        out.append(Finding(
            category="throttling", severity="warning", rank=rank, evidence=ev,
            message=f"The GPU clock was held back during the steps "
                    f"({row['throttle_reasons']}; SM clock min {row['sm_clock_min_mhz']:.0f} "
                    f"MHz, mean {row['sm_clock_mean_mhz']:.0f} MHz).",
            recommendation="Check cooling, power limits (nvidia-smi -q -d PERFORMANCE,POWER) "
                           "and the other jobs on the node; step times are not comparable "
                           "across throttled and unthrottled runs."))
    if row["peak_mem_frac"] > th.peak_memory_frac:
        out.append(Finding(
            category="memory", severity="warning", rank=rank, evidence=ev,
            message=f"Peak GPU memory {row['peak_mem_bytes'] / 1e9:.1f} GB is "
                    f"{row['peak_mem_frac']:.0%} of {row['mem_capacity_bytes'] / 1e9:.0f} GB.",
            recommendation="Leave headroom: activation checkpointing, mixed precision, "
                           "smaller micro-batches or sharding (FSDP / ZeRO)."))
    return out


def mfu_notes(effs: list[dict], th: Thresholds) -> list[Finding]:
    """Why MFU was not judged on some ranks: no FLOPs known, too little compute time
    covered by ops with known FLOPs, or an unknown device (one run-wide finding each)."""
    missing = [e for e in effs if not np.isfinite(e["mfu"])]
    none = [e for e in missing if not e["flops"] > 0]
    low = [e for e in missing if e["flops"] > 0
           and not (th.flops_per_step or e["flop_coverage"] >= th.min_flop_coverage_frac)]
    no_peak = [e for e in missing if e not in none and e not in low]
    model = "Pass the model's FLOPs per step (--flops-per-step / Thresholds.flops_per_step)"
    out = []
    if none:
        out.append(Finding(category="mfu", severity="info", message=(
            f"MFU not computed on {ranks_text(e[RANK] for e in none)}: no op in the "
            "trace has a known FLOP count."), recommendation=(
            f"{model}, or profile with record_shapes=True so profkit counts matmul, "
            "convolution and attention FLOPs from the op shapes.")))
    if low:
        cov = np.nan_to_num([e["flop_coverage"] for e in low])  # NaN: no compute kernels
        out.append(Finding(category="mfu", severity="info", evidence={
            "flop_coverage_min": float(cov.min()), "flop_coverage_max": float(cov.max()),
            "min_flop_coverage_frac": th.min_flop_coverage_frac}, message=(
            f"MFU not judged on {ranks_text(e[RANK] for e in low)}: ops with known "
            f"FLOPs launched only {cov.max():.0%} (or less) of the compute-kernel time that "
            f"can carry FLOPs (below {th.min_flop_coverage_frac:.0%}), so the counted "
            f"{max(e['achieved_tflops'] for e in low):.1f} TFLOP/s is a lower bound."),
            recommendation=f"{model} to judge MFU."))
    if no_peak:
        out.append(Finding(category="mfu", severity="info", message=(
            f"MFU not computed on {ranks_text(e[RANK] for e in no_peak)}: the "
            f"device ({no_peak[0]['device_name'] or 'unnamed'}) is not in the peak table."),
            recommendation="Pass its dense peak (--peak-tflops / Thresholds.peak_tflops)."))
    return out


