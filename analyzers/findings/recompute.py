"""Findings of activation recompute (analyzers/measure/recompute.py): how much of the GPU
time runs forward ops again, what turning checkpointing off would save, and whether the
activations it drops would then fit (the allocator's peak, analyzers/measure/allocations.py).

The saving is the recompute's GPU time and the GPU idle time while the host runs it (inside
its regions: a launch-bound recompute costs its host time too): without checkpointing
neither happens. On H200 (samples/runs/memory/ckpt_on -> ckpt_off) that is 19.6% of the
profiled step, 17.5% measured unprofiled. The cost is memory: the activations recomputed in a step (the bytes the recompute regions leave
allocated) would stay from the forward pass to the backward, so the peak rises by about
their size. Where that does not fit, selective checkpointing keeps the cheap-to-store,
expensive-to-recompute activations (GEMM outputs) and recomputes only the rest.
"""

from __future__ import annotations

import math

from profkit.analyzers.measure.tables import plain
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

SELECTIVE = ("Checkpoint selectively: save the GEMM outputs and recompute only the cheap "
             "ops (elementwise, norms, attention scores): torch.utils.checkpoint with a "
             "policy (torch.utils.checkpoint.create_selective_checkpoint_contexts), "
             "Megatron's --recompute-granularity selective, or checkpoint fewer blocks "
             "(every other one).")


def recompute_findings(result: Result, th: Thresholds) -> list[Finding]:
    return [f for row in result.facts.get("rows", []) for f in rank_finding(row, th)]


def rank_finding(row: dict, th: Thresholds) -> list[Finding]:
    """One finding when recompute holds ``th.recompute_frac`` of the rank's GPU time."""
    share = row["gpu_frac"]
    if not share >= th.recompute_frac:
        return []
    flops = (f"; {pct(row['flop_frac'])} of the executed FLOPs"
             if math.isfinite(row["flop_frac"]) and row["recompute_flops"] > 0 else "")
    message = (f"rank {row['rank']}: activation recompute is {pct(share)} of GPU time "
               f"({row['recompute_ns'] / 1e6:.3g} ms per step, {row['regions']:.3g} forward "
               f"region(s) run again in the backward pass{flops}){_idle_words(row)}")
    evidence = {k: plain(v) for k, v in row.items()}
    saving = float(row["saving_ns"])
    evidence.update(fraction=round(saving / row["step_ns"], 4) if row["step_ns"] else 1.0,
                    saving_ns_per_step=round(saving, 1))
    return [Finding(category="recompute", severity="warning" if share >= 0.15 else "info",
                    rank=row["rank"], message=message, evidence=evidence,
                    recommendation=advice(row))]


def _idle_words(row: dict) -> str:
    """The share of the step its saving comes from, where the GPU also idles while the host
    runs the recompute (issue 40: a saving must be a share the message names)."""
    if not row.get("idle_ns") or not row["step_ns"] or row["saving_ns"] <= row["recompute_ns"]:
        return ""
    return (f"; with the GPU idle while the host runs it, "
            f"{pct(row['saving_ns'] / row['step_ns'])} of the step")


def advice(row: dict) -> str:
    """Turn checkpointing off where the activations fit, else checkpoint selectively."""
    gb = row["activation_bytes"] / 1e9
    share = row["saving_ns"] / row["step_ns"] if row["step_ns"] else math.nan
    off = (f"Turning activation checkpointing off would save ~{pct(share)} of the step (the "
           f"recompute's GPU time and the GPU idle while the host runs it) if memory allows: "
           f"the peak would rise by about the activations' size")
    if row["fits_without"] is None or not math.isfinite(gb):
        return (f"{off} (the trace has no [memory] events to say whether they fit: profile "
                f"with profile_memory=True). Where they do not fit: {SELECTIVE}")
    to = (f", ~{gb:.3g} GB, to ~{row['peak_without_bytes'] / 1e9:.3g} of "
          f"{row['capacity_bytes'] / 1e9:.3g} GB")
    if row["fits_without"]:
        return f"{off}{to}, which fits. Or, to keep some headroom: {SELECTIVE}"
    return (f"{off}{to}, which does not fit. {SELECTIVE}")
