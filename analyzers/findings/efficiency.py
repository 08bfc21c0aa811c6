"""Findings about how well a rank uses its GPU: low MFU, GEMMs off the tensor cores, a
throttled clock, memory near capacity, and why MFU was not judged. Each reads a measurement
of :mod:`profkit.analyzers.measure.efficiency` (its rows as facts)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from profkit.analyzers.findings.savings import ACHIEVABLE_TENSOR_FRAC, bf16_gemm_ns
from profkit.analyzers.measure.devices import peak_of
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
        peak = "given" if th.peak_tflops else \
            f"the {eff['mfu_precision']} dense peak of the {eff['device_model']}"
        hfu = f"; HFU {eff['hfu']:.0%} with the recompute" \
            if eff.get("recompute_flops", 0) > 0 and np.isfinite(eff.get("hfu", np.nan)) else ""
        out.append(Finding(
            category="mfu", severity="warning", rank=rank, evidence=ev,
            message=f"MFU is {eff['mfu']:.0%}: {eff['achieved_tflops']:.0f} of "
                    f"{eff['peak_tflops']:.0f} TFLOP/s ({peak}){hfu}.",
            recommendation="Find where the step goes (breakdown, kernels): raise arithmetic "
                           "intensity (larger batch / sequence"
                           + ("" if "fp8" in str(eff.get("precision_mix"))
                              else ", fp16" if eff.get("mfu_precision") == "fp16" else ", bf16")
                           + "), fuse small ops, overlap communication."))
    # tensor-core work: the GEMMs, and the convolutions autocast also moves to them
    eligible = eff["gemm_time_ns"] + eff.get("fp32_conv_ns", 0)
    if eff["gemm_time_ns"] and eff["tensor_core_gemm_frac"] == 0 and eff["fp32_gemm_ns"] \
            and eligible >= th.precision_min_gemm_frac * eff["step_time_ns"]:
        ev.update(precision_evidence(eff))
        conv = eff.get("fp32_conv_ns", 0) / max(int(eff["steps"]), 1)
        out.append(Finding(
            category="precision", severity="warning", rank=rank, evidence=ev,
            message=f"No GEMM runs on tensor cores; fp32 GEMMs take "
                    f"{ev['fp32_gemm_ns_per_step'] / 1e6:.3g} ms per step "
                    f"({ev['fraction']:.0%} of the step)"
                    + (f", fp32 convolutions {conv / 1e6:.3g} ms" if conv else ""),
            recommendation="Use mixed precision: torch.autocast(dtype=torch.bfloat16) (or "
                           "fp16 with a GradScaler), or at least TF32 via "
                           "torch.backends.cuda.matmul.allow_tf32 = True."))
    return fold_mfu(out)


def fold_mfu(found: list[Finding]) -> list[Finding]:
    """One cause, one finding: where fp32 GEMMs off the tensor cores explain a low MFU, the
    MFU becomes the precision finding's evidence and words, not a finding of its own."""
    mfu = next((f for f in found if f.category == "mfu"), None)
    precision = next((f for f in found if f.category == "precision"), None)
    if mfu is None or precision is None:
        return found
    return [replace(precision, message=f"{precision.message}; {mfu.message.rstrip('.')}")]


def precision_evidence(eff: dict) -> dict:
    """Per step: the fp32 GEMMs' time, GEMM time, their share of the step, and what bf16
    would save (analyzers/findings/savings.py) where their FLOPs and the device are known."""
    steps = max(int(eff["steps"]), 1)
    out = {"fp32_gemm_ns_per_step": eff["fp32_gemm_ns"] / steps,
           "gemm_ns_per_step": eff["gemm_time_ns"] / steps,
           "fraction": round(eff["fp32_gemm_ns"] / eff["step_time_ns"], 4)
           if eff["step_time_ns"] else 1.0}
    peak = peak_of(eff["device_model"])
    if peak is None or not eff.get("fp32_gemm_flops", 0) > 0:
        return out
    bf16 = bf16_gemm_ns(eff["fp32_gemm_flops"], eff.get("fp32_gemm_bytes") or 0.0, peak)
    saving = max(eff["fp32_gemm_known_ns"] - bf16, 0.0) / steps
    if math.isfinite(saving):
        out.update(bf16_estimate_ns_per_step=round(bf16 / steps, 1),
                   achievable_tensor_frac=ACHIEVABLE_TENSOR_FRAC,
                   saving_ns_per_step=round(saving, 1))
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
    covered by ops with known FLOPs, a figure above 100% (with its reason), or a device
    the peak table does not know (one run-wide finding each; each rank in one of them)."""
    missing = [e for e in effs if not np.isfinite(e["mfu"])]
    beyond = [e for e in missing if e.get("mfu_why")]
    missing = [e for e in missing if not e.get("mfu_why")]
    none = [e for e in missing if not e["flops"] > 0]
    low = [e for e in missing if e["flops"] > 0
           and not (th.flops_per_step or e["flop_coverage"] >= th.min_flop_coverage_frac)]
    no_peak = [e for e in missing if e not in none and e not in low
               and not e.get("device_model") and not th.peak_tflops]
    model = "Pass the model's FLOPs per step (--flops-per-step / Thresholds.flops_per_step)"
    out = []
    shaped = [e for e in none if e.get("shapes_recorded")]
    unshaped = [e for e in none if not e.get("shapes_recorded")]
    if unshaped:
        out.append(Finding(category="mfu", severity="info", message=(
            f"MFU not computed on {ranks_text(e[RANK] for e in unshaped)}: no op in "
            "the trace has a known FLOP count."), recommendation=(
            f"{model}, or profile with record_shapes=True so profkit counts matmul, "
            "convolution and attention FLOPs from the op shapes.")))
    if shaped:
        out.append(Finding(category="mfu", severity="info", message=(
            f"MFU not computed on {ranks_text(e[RANK] for e in shaped)}: shapes are "
            "recorded, but no matmul, convolution or attention op (the FLOPs MFU counts) "
            "in the profiled steps; kernels replayed by CUDA graphs or launched outside "
            "recorded ops have none."), recommendation=(
            f"The roofline table shows how close each kernel comes to the device's memory "
            f"and compute peaks; {model[0].lower() + model[1:]} if the model's FLOPs run "
            "in ops profkit has no formula for.")))
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
    if beyond:
        out.append(Finding(category="mfu", severity="info", evidence={
            "why": [e["mfu_why"] for e in beyond]}, message=(
            f"MFU and HFU not shown on {ranks_text(e[RANK] for e in beyond)}: they would "
            f"exceed 100% ({beyond[0]['mfu_why']})."), recommendation=(
            f"{model} and its peak (--peak-tflops) to judge MFU against the model's work.")))
    if no_peak:
        out.append(Finding(category="mfu", severity="info", message=(
            f"MFU not computed on {ranks_text(e[RANK] for e in no_peak)}: the "
            f"device ({no_peak[0]['device_name'] or 'unnamed'}) is not in the peak table."),
            recommendation="Pass its dense peak (--peak-tflops / Thresholds.peak_tflops)."))
    return out


