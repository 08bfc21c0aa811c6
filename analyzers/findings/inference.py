"""Inference findings, per phase (analyzers/measure/inference.py).

One cause, one finding: the time a host-bound decode loses is already the rank's launch
overhead, host work or host syncs (the breakdown's part findings). :func:`fold_phases`
gives those findings the phase split (how much of each token's time the part takes in
decode, and in prefill) and, where decode holds most of the part, the decode advice; their
saving stays the part's. The judge adds what no part says:

- ``decode_batch``: a decode that keeps the GPU busy yet moves its bytes far below the HBM
  roof, with the weights most of them, is a small batch: every weight read serves only
  ``batch`` sequences. A larger (or continuous) batch raises tokens per second (measured on
  the sample GPT, one CUDA graph per token: batch 8 -> 64 gave 5.4x the tokens per second
  at 1.47x the time per token). No step-time saving is claimed: the gain is throughput.
- ``prefill_roof``: a prefill that keeps the GPU busy far below the math roof: attention
  kernels (a fused one where attention is written by hand), and chunked prefill to keep
  long prompts from stalling decode in a serving engine.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
from profkit.analyzers.measure.inference import ESTIMATE
from profkit.analyzers.parts import HOST_SIDE
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import ms, pct, size

FOLDED_PARTS = (*HOST_SIDE, "host_sync", "idle_other")
DECODE_HOST_ADVICE = (
    "Decode is host bound: each new token waits for the host to launch its kernels. Replay "
    "the decode step as a CUDA graph: a static KV cache with torch.compile(mode=\"reduce-"
    "overhead\") (HF generate: cache_implementation=\"static\" with the forward compiled so), "
    "or an engine that captures decode graphs (vLLM, SGLang, TensorRT-LLM); and take the "
    "per-token host syncs out of the loop (a stopping check that reads the GPU every token "
    "can check every few tokens).")
COMPILED_NO_GRAPHS = (
    " The forward is compiled already, but its kernels are still launched one by one: "
    "mode=\"reduce-overhead\" captures them in a CUDA graph.")


def _phase(phases: pd.DataFrame, rank: int | None, phase: str) -> pd.Series | None:
    """The rank's row of ``phase``, None without one."""
    rows = phases[(phases["rank"] == rank) & (phases["phase"] == phase)] \
        if len(phases) else phases
    return rows.iloc[0] if len(rows) else None


def fold_phases(findings: list[Finding], tables: dict[str, pd.DataFrame]) -> list[Finding]:
    """Host-side part findings of inference ranks with their phase split and, where decode
    holds at least half of the part's time, the decode advice (module doc)."""
    phases = tables.get("inference_phases")
    if phases is None or phases.empty:
        return findings
    out = []
    for f in findings:
        decode = _phase(phases, f.rank, "decode") if f.category in FOLDED_PARTS else None
        out.append(f if decode is None else
                   _with_phases(f, decode, _phase(phases, f.rank, "prefill")))
    return out


def _with_phases(f: Finding, decode: pd.Series, prefill: pd.Series | None) -> Finding:
    part = f.category
    in_decode = float(decode[f"{part}_ms"])
    in_prefill = float(prefill[f"{part}_ms"]) if prefill is not None else 0.0
    if in_decode + in_prefill <= 0:
        return f
    per_token = float(decode["tpot_ms"])
    tokens = float(decode["forwards_per_step"])
    said = (f" By phase: {pct(in_decode / float(decode['time_ms']))} of decode "
            f"({ms(in_decode / tokens)} of each token's {ms(per_token)})")
    if prefill is not None:
        said += f", {pct(in_prefill / float(prefill['time_ms']))} of prefill"
    evidence = {**f.evidence, "phases": {
        "decode_ms_per_step": round(in_decode, 3), "prefill_ms_per_step": round(in_prefill, 3),
        "decode_ms_per_token": round(in_decode / tokens, 4), "tpot_ms": round(per_token, 4)}}
    f = replace(f, message=f.message + said, evidence=evidence)
    graphs = (f.evidence.get("launch") or {}).get("graph_launches")
    if in_decode < in_prefill or graphs:
        return f
    advice = DECODE_HOST_ADVICE
    if "compiled" in str(decode["source"]):
        advice += COMPILED_NO_GRAPHS
    return replace(f, recommendation=advice)


def inference_findings(result: Result, th: Thresholds) -> list[Finding]:
    phases = result.tables.get("inference_phases")
    if phases is None or phases.empty:
        return []
    found = []
    for row in phases.itertuples(index=False):
        if row.phase == "decode":
            found += _decode_batch(row, th)
        elif row.phase == "prefill":
            found += _prefill_roof(row, th)
    return found


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _decode_batch(row, th: Thresholds) -> list[Finding]:
    """A GPU-busy decode far below the HBM roof, its bytes mostly weights: batch more."""
    if not (_finite(row.hbm_util) and _finite(row.batch)) or row.gpu_busy < th.phase_busy_frac \
            or row.hbm_util >= th.decode_hbm_low_frac \
            or (row.bytes_coverage < th.min_flop_coverage_frac and row.bytes_source != ESTIMATE) \
            or row.weight_bytes_per_token < 0.5 * row.bytes_per_token:
        return []
    batch = int(row.batch)
    message = (f"decode is far below the HBM roof: each token moves {size(row.bytes_per_token)} "
               f"({size(row.weight_bytes_per_token)} of weights, {size(row.kv_bytes_per_token)} "
               f"of KV cache) in {ms(row.tpot_ms)}, {pct(row.hbm_util)} of the "
               f"{row.hbm_tbps:g} TB/s the {row.device_model} reads (the roof: "
               f"{ms(row.roof_ms_per_token)} per token) at batch {batch}")
    advice = (f"Each token reads every weight once for only {batch} sequence(s): a larger "
              "batch, or continuous batching in a serving engine, raises tokens per second "
              "while the weights dominate the bytes; the time per token grows with the KV "
              "cache, whose bytes grow with the batch.")
    return [Finding(category="decode_batch", severity="warning", message=message,
                    recommendation=advice, rank=int(row.rank), evidence={
                        "batch": batch, "tpot_ms": round(row.tpot_ms, 4),
                        "tokens_per_s": round(row.tokens_per_s, 1),
                        "hbm_util": round(row.hbm_util, 4),
                        "bytes_per_token": row.bytes_per_token,
                        "weight_bytes_per_token": row.weight_bytes_per_token,
                        "kv_bytes_per_token": row.kv_bytes_per_token,
                        "roof_ms_per_token": round(row.roof_ms_per_token, 4),
                        "bytes_coverage": round(row.bytes_coverage, 3),
                        "threshold": th.decode_hbm_low_frac})]


def _prefill_roof(row, th: Thresholds) -> list[Finding]:
    """A GPU-busy prefill far below the math roof."""
    if not _finite(row.mfu) or row.gpu_busy < th.phase_busy_frac or row.mfu >= th.low_mfu_frac \
            or row.share < th.phase_min_share:
        return []
    message = (f"prefill is far below the math roof: {pct(row.mfu)} MFU over its "
               f"{ms(row.time_ms)} ({pct(row.share)} of the step, GPU busy "
               f"{pct(row.gpu_busy)}) against {row.peak_tflops:g} TFLOP/s")
    advice = ("Use fused attention kernels for the prompt (scaled_dot_product_attention with "
              "the flash or cuDNN backend, FlashAttention), not matmul + softmax; in a serving "
              "engine, chunked prefill splits long prompts so decode steps are not held "
              "behind them.")
    return [Finding(category="prefill_roof", severity="info", message=message,
                    recommendation=advice, rank=int(row.rank), evidence={
                        "mfu": round(row.mfu, 4), "prefill_ms": round(row.time_ms, 3),
                        "share": round(row.share, 4), "gpu_busy": round(row.gpu_busy, 4),
                        "peak_tflops": row.peak_tflops, "threshold": th.low_mfu_frac})]

