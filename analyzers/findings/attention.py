"""Findings of hand-written attention (analyzers/measure/attention.py): swap it for
``scaled_dot_product_attention``, with the saving of a fused kernel at its achievable rate
and the score matrices it no longer keeps."""

from __future__ import annotations

import math

from profkit.analyzers.measure.tables import plain
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

MIN_FRAC = 0.05  # hand-written attention under this share of the step is no finding
SDPA = ("Replace the hand-written attention (q @ k.transpose(-2, -1), the mask, softmax, "
        "@ v) with torch.nn.functional.scaled_dot_product_attention(q, k, v, "
        "is_causal=True, or attn_mask=...): its FlashAttention, memory-efficient or cuDNN "
        "kernels compute the same result in one fused kernel each way and never write the "
        "T x T scores to memory (or FlashAttention itself, flash_attn_func).")


def attention_findings(result: Result, th: Thresholds) -> list[Finding]:
    return [f for row in result.facts.get("rows", []) for f in _finding(row)]


def _finding(row: dict) -> list[Finding]:
    step, attention = row["step_ns"], row["attention_ns"]
    if not step or attention < MIN_FRAC * step:
        return []
    frac = attention / step
    estimate = row["flash_estimate_ns"]
    evidence = {k: plain(v) for k, v in row.items()}
    evidence.update(fraction=round(frac, 4))
    shape = (f"{row['heads_x_batch']} x {row['seq']} x {row['seq']} score matrices"
             + (f", head dim {row['head_dim']}" if row["head_dim"] else ""))
    freed = (f"; it frees at least {row['score_bytes'] / 1e9:.2f} GB of scores kept for the "
             "backward" if row["training"] else "")
    finding = Finding(
        category="attention", severity="warning" if frac >= 0.20 else "info", rank=row["rank"],
        message=(f"rank {row['rank']}: attention written by hand: {pct(frac)} of the step "
                 f"({attention / 1e6:.3g} ms per step, {row['kernels']:.3g} kernels) over "
                 f"{shape}, without scaled_dot_product_attention{freed}"),
        evidence=evidence, recommendation=SDPA)
    if not math.isfinite(estimate):
        return [finding]
    saving = max(attention - estimate, 0.0)
    return [finding.with_saving(saving / 1e6, saving / step)]
