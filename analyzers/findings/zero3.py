"""DeepSpeed ZeRO-3 ranks whose GPU waits on their host: the launch-overhead and host-work
findings of such a rank are one cause, ZeRO-3's per-module hooks (the autograd Functions
it runs around every module, the parameter fetch and release in them), and get one finding
with DeepSpeed's advice, not CUDA graphs or torch.compile: neither can capture ZeRO-3's
per-module parameter fetching (:func:`zero3_host`).

The advice is backed by profkit's own 2 x H200 twins of the sample GPT (8 blocks, dim 1024,
bf16; samples/runs/parallel/SUMMARY.txt, docs/parallelism.md): the step after the profiler
stopped (rank 0, median of steps 5-9), 105 ms with DeepSpeed's defaults, 92 ms (-12%) with
stage3_param_persistence_threshold 1e7 (nothing of that model sharded), 115 ms (+9%) with
reduce_bucket_size 1e6, 103 ms with stage3_prefetch_bucket_size 0 (no change: the default's
steps 5-9 spread from 98 to 106 ms).

The saving is the GPU's wait inside ZeRO-3's code (``hook_idle_ms_per_step`` of
:mod:`profkit.analyzers.measure.zero3`): what fewer fetches and hooks can remove at most
(on the twins' profiled steps it was 16% and 23% of the step on the two ranks; the
persistence twin's unprofiled step was 12% shorter).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.findings.hostfold import fold_host, host_findings, waits_words
from profkit.analyzers.result import Finding

MIN_HOOK_FRAC = 0.05  # the GPU's wait inside ZeRO-3's code, of the step, for ZeRO-3 advice
ADVICE = (
    "Cut ZeRO-3's per-module host work; CUDA graphs and torch.compile cannot capture its "
    "parameter fetching. Raise stage3_param_persistence_threshold so that small parameters "
    "stay whole on every rank (no fetch and release for them, fewer hooks with work to do; "
    "costs their memory on each rank): on profkit's 2 x H200 sample GPT, 1e7 instead of 1e5 "
    "cut the step 12% (105 -> 92 ms). Keep reduce_bucket_size large: a bucket of 1e6 "
    "instead of 5e8 cost 9% there (115 ms; 50 reduce-scatters per step instead of 1). "
    "stage3_prefetch_bucket_size changed nothing there (0 instead of 5e7: 103 ms, within "
    "the steps' spread). Where "
    "the model and its optimizer state fit, ZeRO-2 or plain data parallelism has no "
    "per-module hooks at all.")
# every parameter already persistent (no fetch in the forward or backward): the hooks still
# run around every module; no measured twin for leaving ZeRO-3, so no saving
ADVICE_NO_FETCH = (
    "ZeRO-3 fetches no parameter in the forward or backward on this rank (every parameter "
    "is under stage3_param_persistence_threshold: only re-gathered after the optimizer "
    "step), yet its hooks still run around every module; "
    "CUDA graphs and torch.compile cannot capture them. Where the model and its optimizer "
    "state fit, ZeRO-2 or plain data parallelism has no per-module hooks at all "
    "(not measured here: no saving is estimated). Keep reduce_bucket_size large.")


def _zero3_words(row: dict, host: list[Finding]) -> str:
    gathers = sum(row[f"all_gathers_{p}"] for p in ("forward", "backward", "after_backward"))
    return (f"rank {int(row['rank'])}: the GPU waits on its host ({waits_words(host)} of "
            "the step), "
            f"{row['hook_idle_ms_per_step']:.1f} ms per step of it inside DeepSpeed ZeRO-3's "
            f"per-module hooks ({U.number(row['hooked_forwards_per_step'])} hooked module "
            f"forwards and {U.number(gathers)} parameter all-gathers per step: "
            "PreBackwardFunctionForModule, PostBackwardFunctionModule, "
            "LinearFunctionForZeroStage3 and the fetches)")


def zero3_host(findings: list[Finding], table: pd.DataFrame | None) -> list[Finding]:
    """On each ZeRO-3 rank whose GPU waits at least MIN_HOOK_FRAC of its step inside
    ZeRO-3's code, its launch-overhead and host-work findings become one: the larger kept
    (the verdict's part), worded for ZeRO-3, with DeepSpeed's advice, the other as its
    evidence, and as saving the wait inside ZeRO-3's code (module doc); where the rank
    fetches nothing (every parameter persistent), other advice and no saving."""
    if table is None or table.empty or "hook_idle_ms_per_step" not in table:
        return findings
    rows = {int(r["rank"]): r for r in table.to_dict("records")
            if r["step_ms"] > 0 and r["hook_idle_ms_per_step"] >= MIN_HOOK_FRAC * r["step_ms"]}
    return fold_host(findings, host_findings(findings, rows),
                     lambda f, host: _reworded(f, rows[f.rank], host))


def _reworded(f: Finding, row: dict, host: list[Finding]) -> Finding:
    hook_ms, step_ms = float(row["hook_idle_ms_per_step"]), float(row["step_ms"])
    evidence = {**f.evidence, "zero3_hook_idle_ms_per_step": round(hook_ms, 3),
                "zero3_host_idle_ms_per_step": round(float(row["host_idle_ms_per_step"]), 3),
                "zero3_hooked_forwards_per_step": float(row["hooked_forwards_per_step"]),
                "folded": {g.category: g.message for g in host if g is not f}}
    f = replace(f, message=_zero3_words(row, host), evidence=evidence)
    if row["all_gathers_forward"] + row["all_gathers_backward"] == 0:
        return replace(f, recommendation=ADVICE_NO_FETCH, estimated_saving=None)
    # the saving: the wait inside ZeRO-3's code, never more than the kept finding's own
    saving_ms = min(hook_ms, (f.estimated_saving or {}).get("ms_per_step", hook_ms))
    return replace(f, recommendation=ADVICE).with_saving(saving_ms, saving_ms / step_ms)
