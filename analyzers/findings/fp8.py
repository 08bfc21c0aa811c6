"""Findings of fp8 (analyzers/measure/fp8.py): the quantisation kernels around fp8 GEMMs,
with fusion advice and the saving of fusing them; and, for a step whose bf16 GEMMs hold a
large share of it on a device with an fp8 peak, what fp8 GEMMs would give (an estimate,
with its assumptions)."""

from __future__ import annotations

import math

from profkit.analyzers.measure.fp8 import (
    ACHIEVABLE_HBM_FRAC,
    ACHIEVABLE_TENSOR_FRAC,
    EAGER_QUANT_PASSES,
    FUSED_QUANT_PASSES,
)
from profkit.analyzers.measure.tables import plain
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

FUSE = ("Fuse the quantisation: torch.compile the fp8 linear (amax, scale and cast become one "
        "or two kernels), or use torchao.float8 (convert_to_float8_training) or Transformer "
        "Engine, whose cast-transpose kernels quantise in one pass; quantise each weight once "
        "per step, not at every use, and consider delayed scaling (the amax of earlier steps).")
QUANT_MIN_FRAC = 0.02  # quantisation under this share of the step is no finding


def fp8_findings(result: Result, th: Thresholds) -> list[Finding]:
    out = []
    for row in result.facts.get("rows", []):
        out += quant_finding(row) + whatif_finding(row, th)
    return out


def quant_finding(row: dict) -> list[Finding]:
    """The quantisation kernels around fp8 GEMMs, where they take a visible share."""
    step = row["step_ns"]
    if not row["fp8_gemm_ns"] or not step or row["quant_ns"] < QUANT_MIN_FRAC * step:
        return []
    frac = row["quant_ns"] / step
    evidence = {k: plain(v) for k, v in row.items()}
    evidence.update(fraction=round(frac, 4), quant_ns_per_step=round(row["quant_ns"], 1),
                    fp8_gemm_ns_per_step=round(row["fp8_gemm_ns"], 1))
    return [Finding(
        category="fp8", severity="warning" if frac >= 0.10 else "info", rank=row["rank"],
        message=(f"rank {row['rank']}: fp8 quantisation overhead: the amax, scale and cast "
                 f"kernels around the fp8 GEMMs take {row['quant_ns'] / 1e6:.3g} ms per step "
                 f"({pct(frac)} of the step, {row['quant_kernels']:.3g} kernels) beside "
                 f"{row['fp8_gemm_ns'] / 1e6:.3g} ms of fp8 GEMMs"),
        evidence=evidence, recommendation=FUSE)]


def whatif_finding(row: dict, th: Thresholds) -> list[Finding]:
    """bf16 GEMMs on a device with an fp8 peak: what fp8 GEMMs would save (an estimate)."""
    step, est = row["step_ns"], row["fp8_estimate_ns"]
    if row["fp8_gemm_ns"] or not step or not math.isfinite(est) \
            or row["bf16_gemm_ns"] < th.fp8_whatif_gemm_frac * step:
        return []
    saving = max(row["bf16_gemm_known_ns"] - est, 0.0)
    if saving < 0.05 * step:
        return []
    evidence = {k: plain(v) for k, v in row.items()}
    fused = row["fp8_fused_estimate_ns"]
    evidence.update(fraction=round(row["bf16_gemm_known_ns"] / step, 4),
                    bf16_gemm_ns_per_step=round(row["bf16_gemm_ns"], 1),
                    fp8_estimate_ns_per_step=round(est, 1), saving_ns_per_step=round(saving, 1),
                    fused_saving_ns_per_step=round(max(row["bf16_gemm_known_ns"] - fused, 0), 1),
                    assumption=f"fp8 GEMMs at {ACHIEVABLE_TENSOR_FRAC:.0%} of the fp8 dense "
                               f"peak; a dynamic quantisation of their inputs moving "
                               f"{EAGER_QUANT_PASSES}x (eager) or {FUSED_QUANT_PASSES}x (fused) "
                               f"their bf16 bytes at {ACHIEVABLE_HBM_FRAC:.0%} of HBM bandwidth")
    return [Finding(
        category="fp8", severity="info", rank=row["rank"],
        message=(f"rank {row['rank']}: bf16 GEMMs take {row['bf16_gemm_ns'] / 1e6:.3g} ms per "
                 f"step ({pct(row['bf16_gemm_ns'] / step)} of the step); in fp8 on the "
                 f"{row['device_model']} they would take about {est / 1e6:.3g} ms with an eager "
                 f"quantisation of their inputs, {fused / 1e6:.3g} ms with a fused one (an "
                 f"estimate: fp8 GEMMs at {ACHIEVABLE_TENSOR_FRAC:.0%} of the fp8 dense peak)"),
        evidence=evidence,
        recommendation=("Try fp8 training for the large linear layers: torchao.float8 "
                        "(convert_to_float8_training, with torch.compile) or Transformer "
                        "Engine's fp8 autocast. Check the loss curve against bf16: fp8 "
                        "needs per-tensor or per-row scaling, and small or "
                        "accuracy-sensitive layers (first, last) are best left in bf16."))]
