"""Findings about kernels and their launches: a launch-bound GPU, slow runtime calls in the
steps, short kernels that repeat in fixed sequences (fusion), and runs without GPU events.
Each reads a measurement of :mod:`profkit.analyzers.measure.kernels` (its tables and facts)."""

from __future__ import annotations

import pandas as pd
from profkit.analyzers.measure.fusion import SEQUENCE_SEP
from profkit.analyzers.measure.kernels import MIN_KERNELS, QUEUE_FULL_DEPTH
from profkit.analyzers.measure.tables import RANK, plain
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

from profkit.classify.names import short_kernel_name


def kernel_findings(result: Result, th: Thresholds) -> list[Finding]:
    """Launch-bound ranks, slow runtime calls, then fusion candidates."""
    tables = result.tables
    out = launch_findings(tables["short_kernels"], tables["launches"], th)
    out += [f for facts in result.facts["slow_calls"] for f in slow_call_findings(facts, th)]
    return out + fusion_findings(tables["fusion_candidates"], th)


def no_gpu_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    return [Finding(
        category="coverage", severity="info",
        message=f"No GPU events in this run: {result.facts['what']} skipped.",
        recommendation="Profile with CUDA activities enabled "
                       "(torch.profiler.ProfilerActivity.CUDA) to analyse GPU work.")]


LAUNCH_ADVICE = ("Capture the step in a CUDA graph (torch.compile(mode='reduce-overhead') or "
                 "torch.cuda.graphs) or fuse the small ops with torch.compile; larger batches "
                 "also amortise each launch over more work.")


def launch_findings(short: pd.DataFrame, launches: pd.DataFrame,
                    th: Thresholds) -> list[Finding]:
    """Launch-bound (warning) when the GPU is mostly idle while many short kernels run or
    launch calls take a large share of the step. Heavy launch calls behind a busy GPU are
    hidden for now (info); behind a full launch queue they are waiting, not overhead."""
    out = []
    for s, lc in zip(short.to_dict("records"), launches.to_dict("records")):
        starved = s["kernel_busy_frac"] < th.gpu_util_low_frac
        enough = min(s["kernels"], lc["launch_calls"]) >= MIN_KERNELS
        many_short = s["short_frac"] >= th.short_kernel_count_frac and starved
        heavy_api = lc["launch_time_frac"] > th.launch_api_frac
        if not enough or not (many_short or heavy_api):
            continue
        why = [f"{s['short_frac']:.0%} of {s['kernels']} kernels run under "
               f"{th.short_kernel_ns / 1e3:g} us"] if many_short else []
        if heavy_api:
            why.append(f"launch calls take {lc['launch_time_frac']:.0%} of the step "
                       f"({lc['launch_calls']} calls, median {lc['launch_median_ns'] / 1e3:.1f} us)")
        why.append(f"kernels keep the GPU busy {s['kernel_busy_frac']:.0%} of the step")
        lead = "The GPU is launch-bound: " if starved else \
            "Launch overhead is high but hidden behind a busy GPU for now: "
        message = lead + "; ".join(why) + "." + queue_note(lc) + (
            " CUDA graphs are already in use: capture more of the step."
            if lc["graph_launches"] else "")
        out.append(Finding(
            category="launch", severity="warning" if starved else "info",
            rank=int(s[RANK]), message=message, recommendation=LAUNCH_ADVICE,
            evidence={k: plain(v) for k, v in {**s, **lc}.items()}))
    return out


def queue_note(lc: dict) -> str:
    if lc["max_queue_depth"] < QUEUE_FULL_DEPTH:
        return ""
    return (f" The launch queue filled up (depth {int(lc['max_queue_depth'])}): launch calls "
            "then block until the GPU frees a slot, so part of their time is the GPU's pace.")


def slow_call_findings(facts: dict, th: Thresholds) -> list[Finding]:
    """One finding per rank whose steps hold slow runtime calls
    (:func:`profkit.analyzers.measure.kernels.slow_call_facts`)."""
    lc, frac, names = facts["launch"], facts["frac"], facts["names"]
    listed = ", ".join(f"{n} x{c} ({t / 1e3:.0f} us)" for n, c, t in names)
    serious = frac > th.launch_api_frac and lc["max_queue_depth"] < QUEUE_FULL_DEPTH
    return [Finding(
        category="runtime_calls", severity="warning" if serious else "info",
        rank=facts["rank"],
        message=f"{facts['calls']} runtime calls took over "
                f"{th.slow_runtime_call_ns / 1e3:g} us ({frac:.1%} of the step): {listed}."
                + queue_note(lc),
        recommendation="Keep allocations and other blocking runtime calls out of the step "
                       "(warm up the caching allocator, reuse buffers, no per-step "
                       "cudaMalloc/cudaFree or pinned-memory allocation).",
        evidence={"slow_runtime_calls": facts["calls"], "slow_runtime_ns": facts["ns"],
                  "slow_frac": float(frac),
                  "calls": {n: c for n, c, _ in names}})]


def fusion_findings(fusion: pd.DataFrame, th: Thresholds) -> list[Finding]:
    top = fusion[fusion["count"] >= th.fusion_min_count].head(3)
    if top.empty:
        return []
    lines = "; ".join(f"[{brief(r.sequence)}] x{int(r.count)}" for r in top.itertuples())
    return [Finding(
        category="fusion", severity="info",
        message=f"Short kernels repeat in fixed sequences, the most frequent: {lines}.",
        recommendation="Fuse them: torch.compile generates one kernel for chains of "
                       "elementwise ops and reductions; use fused implementations (fused=True "
                       "/ foreach optimizers, fused norms) where they exist.",
        evidence={"sequences": top["sequence"].tolist(),
                  "counts": [int(c) for c in top["count"]]})]


def brief(sequence: str) -> str:
    """A sequence with each kernel name as people read it (profkit/classify/names.py), for
    messages; the evidence keeps the full names."""
    return SEQUENCE_SEP.join(short_kernel_name(n) for n in sequence.split(SEQUENCE_SEP))
