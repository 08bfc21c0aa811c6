"""Findings of the kernel roofline (analyzers/measure/roofline.py): memory-bound work that
holds a large share of the step, the ops behind it and the fix that fits them, with the
saving of fusing its runs of consecutive kernels (analyzers/measure/memruns.py). And the
advice that must not reach memory-bound work: :func:`memory_advice` rewrites the generic
compute advice (tensor cores, arithmetic intensity) of ranks whose kernel time is mostly
memory-bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
from profkit.analyzers.measure.tables import RANK
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

FUSION_FAMILIES = ("elementwise", "norm", "softmax", "reduction", "copy", "fill")
FIX = {
    "fusion": "Fuse the chains of elementwise, normalisation and reduction ops: torch.compile "
              "generates one kernel that reads their inputs once and writes the result once "
              "(a hand-written or library fused kernel does the same).",
    "foreach": "Use a fused optimizer (torch.optim.AdamW(..., fused=True), the same for Adam "
               "and SGD) or compile the optimizer step: one pass over parameters, gradients "
               "and states instead of one per foreach op.",
    "channels_last": "For a convolutional model, use channels_last "
                     "(model.to(memory_format=torch.channels_last) and the inputs likewise): "
                     "cuDNN then skips layout copies and fuses normalisation and activations.",
    "triton": "The Triton kernels are torch.compile's, already fused (each tensor moved "
              "once): tune them (mode='max-autotune') or read them with Nsight Compute where "
              "they stay well below the HBM peak.",
    "optimizer": "The optimizer is already fused: smaller or fewer optimizer states (bf16 / "
                 "8-bit states, sharded with ZeRO / FSDP) move fewer bytes.",
    "index": "Gather / scatter / index kernels move scattered rows: use a better "
             "implementation (sorted or coalesced indices, segment reductions such as "
             "torch_scatter or a CSR sparse matmul, embedding_bag, index_add_ instead of "
             "scatter with duplicates), and keep the gathered features in a smaller dtype.",
}
ALREADY_FUSED = ("triton", "optimizer")
NOT_COMPUTE = ("Tensor cores, fp8 and larger batches do not speed up memory-bound kernels; "
               "moving fewer bytes does (bf16 activations halve them).")
COMPUTE_ADVICE = ("Most of this compute time is memory-bound kernels (see the memory-bound "
                  "finding and the roofline table): fuse them (torch.compile), use fused "
                  "optimizers and implementations that move fewer bytes. ")
MFU_ADVICE = ("MFU is low because most kernel time is memory-bound (few FLOPs per byte "
              "moved; see the roofline table): fuse memory-bound ops (torch.compile), use "
              "fused optimizers, move fewer bytes. ")


def roofline_findings(result: Result, th: Thresholds) -> list[Finding]:
    return [f for facts in result.facts["ranks"] for f in memory_findings(facts, th)]


def memory_findings(facts: dict, th: Thresholds) -> list[Finding]:
    """One finding when memory-bound kernels hold ``th.memory_bound_frac`` of the step."""
    step = facts["step_ns"]
    memory = facts["bound_ns"]["memory"]
    if not step or memory < th.memory_bound_frac * step:
        return []
    frac = min(memory / step, 1.0)
    runs = facts["runs"]
    ops = "; ".join(f"{op} {ns / 1e6:.3g} ms" for op, _, ns in facts["memory_ops"])
    rate = facts["memory_gbps"]
    message = (f"rank {facts[RANK]}: {pct(frac)} of the step is memory-bound kernels "
               f"({_rate_text(rate, facts['peak_gbps'])}); per step: {ops}")
    if runs["runs"]:
        message += (f". {runs['kernels']:.0f} of them run back to back in {runs['runs']:.0f} "
                    f"chain(s) one fused kernel could replace, moving "
                    f"{runs['min_bytes'] / 1e9:.3g} GB instead of {runs['bytes'] / 1e9:.3g} GB")
    evidence = {
        "fraction": round(frac, 4), "memory_ms_per_step": round(memory / 1e6, 3),
        "math_ms_per_step": round(facts["bound_ns"]["math"] / 1e6, 3),
        "latency_ms_per_step": round(facts["bound_ns"]["latency"] / 1e6, 3),
        "achieved_gbps": _round(rate), "peak_gbps": _round(facts["peak_gbps"]),
        "ops": [[op, family, round(ns / 1e6, 3)] for op, family, ns in facts["memory_ops"]],
        "fusable_chains": {k: round(v, 3) if isinstance(v, float) else v
                           for k, v in runs.items()},
        "estimated_dram_bw_pct": _round(facts.get("estimated_dram_bw_pct")),
        "gpm_dram_bw_pct": _round(facts.get("gpm_dram_bw_pct"))}
    if runs["saving_ns"] > 0:
        evidence["saving_ns_per_step"] = round(runs["saving_ns"], 1)
    fixes = fix_list(facts)
    fused = all(f in ALREADY_FUSED for f in fixes)  # nothing left to fuse: worth knowing
    return [Finding(category="memory_bound",
                    severity="warning" if frac >= 0.5 and not fused else "info",
                    rank=facts[RANK], message=message, evidence=evidence,
                    recommendation=" ".join(FIX[f] for f in fixes) + " " + NOT_COMPUTE)]


FIX_MIN_FRAC = 0.1  # a fix is advised for op families with this share of the memory-bound time


def fix_list(facts: dict) -> list[str]:
    """The fixes (FIX keys) that fit the memory-bound time's op families, the largest
    first; a fix whose families hold less than FIX_MIN_FRAC of that time is left out (a GPT
    whose embedding backward is 2% of it is not told about scatter libraries), and
    channels_last only where convolutions are part of the memory-bound time's model."""
    by_fix: dict[str, float] = {}
    for family, ns in facts["memory_families_ns"].items():
        fix = ("fusion" if family in FUSION_FAMILIES else family
               if family in FIX else "")
        if fix:
            by_fix[fix] = by_fix.get(fix, 0.0) + ns
    total = sum(by_fix.values())
    ranked = sorted(by_fix, key=lambda k: -by_fix[k])
    kept = [f for i, f in enumerate(ranked) if i == 0 or by_fix[f] >= FIX_MIN_FRAC * total]
    if facts.get("conv_ns", 0.0) > 0 and kept:
        kept.append("channels_last")
    return kept or ["fusion"]


def _rate_text(rate: float, peak: float) -> str:
    if not math.isfinite(rate):
        return "their bytes are not known"
    if not math.isfinite(peak):
        return f"{rate:.0f} GB/s on the bytes they move"
    return f"{rate:.0f} GB/s on the bytes they move, of {peak:.0f} GB/s peak"


def _round(value) -> float | None:
    return round(float(value), 1) if value is not None and math.isfinite(value) else None


def memory_ranks(roofline: pd.DataFrame) -> dict[int, float]:
    """Ranks whose kernel time is mostly classified (at least half of it has a known cost)
    and more memory-bound than math-bound: {rank: memory-bound share of its kernel time}.
    A CUDA-graph replay whose few recorded kernels are memory-bound is not such a rank."""
    if roofline is None or roofline.empty:
        return {}
    # the sums a pivot table of them holds (its groupby's), without building it (~5 ms)
    sums = roofline.groupby([RANK, "bound"], sort=True)["kernel_ms_per_step"].sum()
    per_rank: dict = {}
    for (rank, bound), ms in zip(sums.index.tolist(), sums.tolist()):
        per_rank.setdefault(rank, {})[bound] = ms
    out = {}
    for rank, by in per_rank.items():
        math_ms, memory_ms = by.get("math", 0.0), by.get("memory", 0.0)
        unknown_ms = by.get("unknown", 0.0)
        total = math_ms + memory_ms + by.get("latency", 0.0) + unknown_ms  # in column order
        share = memory_ms / total if total > 0 else 0.0
        if memory_ms > math_ms and total - unknown_ms >= 0.5 * total > 0:
            out[int(rank)] = float(share)
    return out


def memory_advice(findings: list[Finding], roofline: pd.DataFrame) -> list[Finding]:
    """The compute-bound and low-MFU findings of ranks whose kernel time is mostly
    memory-bound, with advice for memory-bound work instead of tensor cores and intensity."""
    ranks = memory_ranks(roofline)
    if not ranks:
        return findings
    out = []
    for f in findings:
        share = ranks.get(f.rank) if f.rank is not None else None
        if share is not None and f.category == "compute":
            f = replace(f, message=f"{f.message}; {pct(share)} of the kernel time is "
                                   "memory-bound", recommendation=COMPUTE_ADVICE + NOT_COMPUTE)
        elif share is not None and f.category == "mfu" and f.severity != "info":
            f = replace(f, recommendation=MFU_ADVICE + NOT_COMPUTE)
        out.append(f)
    return out
