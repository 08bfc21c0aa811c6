"""Findings on the risks and costs of the caching allocator (``measure/allocator.py``,
``measure/peaklive.py``, ``measure/allocations.py``): near capacity, fragmentation,
allocator churn and out-of-memory, each with what holds the memory at its peak.

- near capacity: the allocator's peak reserved (or allocated) above ``peak_memory_frac`` of
  the device; the largest holders at the peak say what to shrink. NVML's own ``memory``
  finding of the same rank folds into it (:func:`fold_memory`, one cause, one finding).
- fragmentation: reserved at least ``fragmentation_ratio`` times allocated and
  ``fragmentation_min_bytes`` above it: cached blocks split to sizes the next requests do
  not fit; ``expandable_segments`` gives most of the difference back.
- allocator churn: ``cudaMalloc`` / ``cudaFree`` inside the used steps; frees and mallocs in
  every step are the cache emptied each step (``torch.cuda.empty_cache()``). Its saving is
  the GPU time lost inside those calls; the slow-runtime-calls finding of the same calls
  folds into it (:func:`fold_memory`).
- out-of-memory: the step the job failed in, the allocation that failed, the last one the
  trace saw and what was live; the step is left out of the timing.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

GB = 1e9  # decimal, as every memory figure of the findings
TOP = 3  # holders a finding names
MIN_COST_FRAC = 0.01  # allocator calls costing less of the step are no churn finding
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "hipMalloc", "hipFree")
ALLOC_CONF_ADVICE = (
    "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the allocator grows one segment "
    "per stream instead of caching fixed blocks, so blocks of varying sizes reuse the same "
    "memory. Where that is not available, max_split_size_mb:<MB> keeps large cached blocks "
    "from being split for small requests and garbage_collection_threshold:0.8 releases "
    "unused cached blocks before the allocator asks the driver for more; padding "
    "variable-length batches to a few bucket sizes makes the requests repeat.")


def allocator_findings(result: Result, th: Thresholds) -> list[Finding]:
    """Near capacity, fragmentation, churn and out-of-memory findings, per rank."""
    facts = result.facts
    ranks = facts.get("ranks", pd.DataFrame())
    live, peaks = facts.get("live", pd.DataFrame()), facts.get("peak", pd.DataFrame())
    ooms = result.tables.get("memory_oom", pd.DataFrame())
    oom_ranks = set(ooms["rank"].astype(int)) if len(ooms) else set()
    out = [_oom(row) for row in ooms.to_dict("records")]
    for row in ranks.to_dict("records"):
        rank = int(row["rank"])
        holders = holders_text(live, rank)
        near = _near_capacity(row, holders, lambda r=rank: _peak_row(peaks, r), th) \
            if rank not in oom_ranks else []
        frag = _fragmentation(row, th)
        if near and frag:  # one cause: the fragmentation is what brings it near capacity
            near = [replace(near[0], evidence={**near[0].evidence,
                                               "fragmentation": frag[0].evidence},
                            recommendation=near[0].recommendation + frag[0].recommendation
                            .removeprefix(ALLOC_CONF_ADVICE))]
            frag = []
        out += near + frag
    calls = result.tables.get("allocator_calls", pd.DataFrame())
    near_ranks = _near_ranks(ranks, th)
    for rank, steps in (calls.groupby("rank") if len(calls) else ()):
        near = int(rank) in near_ranks
        found = _churn(int(rank), steps, facts.get("step_ms", {}), near, th)
        out += [found] if found is not None else []
    return out


def holders_text(live: pd.DataFrame, rank: int, top: int = TOP) -> str:
    """"op (GB, n allocations)" of the largest holders of the rank's peak."""
    if live is None or live.empty:
        return ""
    at = np.flatnonzero(live["rank"].to_numpy() == rank)
    size = live["live_bytes"].to_numpy()[at]
    if size.dtype.kind == "i":  # nlargest's rows (ties in table order), without its ~0.5 ms
        at = at[np.argsort(-size, kind="stable")[:top]]
    else:
        at = at[np.asarray(live.iloc[at].reset_index(drop=True)
                           .nlargest(top, "live_bytes").index)]
    col = {c: live[c].to_numpy() for c in ("op", "annotation", "live_bytes", "count",
                                           "allocated_before_step")}
    return "; ".join(f"{col['op'][i]}{' in ' + col['annotation'][i] if col['annotation'][i] else ''} "
                     f"({col['live_bytes'][i] / GB:.2f} GB, {int(col['count'][i])}"
                     f"{' from earlier steps' if col['allocated_before_step'][i] else ''})"
                     for i in at.tolist())


def _peak_row(peaks: pd.DataFrame, rank: int) -> dict:
    if peaks is None or peaks.empty:
        return {}
    mine = peaks[peaks["rank"] == rank]
    return mine.iloc[0].to_dict() if len(mine) else {}


def _near_ranks(ranks: pd.DataFrame, th: Thresholds) -> set:
    """The ranks with a device past ``peak_memory_frac`` of its capacity."""
    if ranks is None or ranks.empty:
        return set()
    near = _used_frac(ranks["peak_reserved_bytes"].to_numpy(), ranks["peak_allocated_bytes"]
                      .to_numpy(), ranks["capacity_bytes"].to_numpy()) > th.peak_memory_frac
    return {int(r) for r in ranks["rank"].to_numpy()[near]}


def _used_frac(reserved, allocated, capacity) -> np.ndarray:
    """The larger of reserved and allocated over capacity (NaN without a capacity)."""
    cap = np.asarray(capacity, dtype=np.float64)
    used = np.fmax(np.asarray(reserved, dtype=np.float64),
                   np.asarray(allocated, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        return used / np.where(cap > 0, cap, np.nan)


def _near_capacity(row: dict, holders: str, peak_of, th: Thresholds) -> list[Finding]:
    """``peak_of()``: the rank's row of the peak table (asked for only when near)."""
    frac = float(_used_frac([row["peak_reserved_bytes"]], [row["peak_allocated_bytes"]],
                            [row["capacity_bytes"]])[0])
    if not (math.isfinite(frac) and frac > th.peak_memory_frac):
        return []
    rank, cap, peak = int(row["rank"]), float(row["capacity_bytes"]), peak_of()
    at = f" At the peak ({peak.get('op', '?')} running) the most memory is held by {holders}." \
        if holders else ""
    return [Finding(
        category="near_capacity", severity="warning", rank=rank,
        message=(f"rank {rank}: the allocator's peak is {frac:.0%} of the device "
                 f"({row['peak_allocated_bytes'] / GB:.1f} GB allocated, "
                 f"{row['peak_reserved_bytes'] / GB:.1f} GB reserved of {cap / GB:.1f} GB): a "
                 f"longer sequence, a larger batch or more fragmentation runs out of memory."
                 + at),
        recommendation=("Make room before it fails: activation checkpointing on the layers "
                        "that hold the peak, a smaller micro-batch with gradient "
                        "accumulation, bf16 activations, or sharding weights, gradients and "
                        "optimizer state (FSDP / ZeRO)."
                        + (" Reserved is well above allocated: " + ALLOC_CONF_ADVICE
                           if row["reserved_over_allocated"] >= th.fragmentation_ratio else "")),
        evidence={"device": int(row["device"]), "peak_used_frac": round(frac, 4),
                  "peak_allocated_bytes": int(row["peak_allocated_bytes"]),
                  "peak_reserved_bytes": int(row["peak_reserved_bytes"]),
                  "capacity_bytes": cap, "op_at_peak": peak.get("op", ""),
                  "holders": holders})]


def _fragmentation(row: dict, th: Thresholds) -> list[Finding]:
    reserved, allocated = float(row["peak_reserved_bytes"]), float(row["peak_allocated_bytes"])
    extra = reserved - allocated
    if not (allocated > 0 and reserved >= th.fragmentation_ratio * allocated
            and extra >= th.fragmentation_min_bytes):
        return []
    rank = int(row["rank"])
    return [Finding(
        category="fragmentation", severity="warning", rank=rank,
        message=(f"rank {rank}: the allocator reserves {reserved / GB:.1f} GB for a peak of "
                 f"{allocated / GB:.1f} GB in tensors ({reserved / allocated:.2f}x): "
                 f"{extra / GB:.1f} GB sits in cached blocks too fragmented to reuse, memory "
                 "the job cannot use for a larger batch and that brings out-of-memory "
                 "closer."),
        recommendation=ALLOC_CONF_ADVICE + f" Up to {extra / GB:.1f} GB would come back.",
        evidence={"device": int(row["device"]), "peak_reserved_bytes": int(reserved),
                  "peak_allocated_bytes": int(allocated),
                  "reserved_over_allocated": round(reserved / allocated, 4),
                  "giveback_bytes": int(extra)})]


def _churn(rank: int, steps: pd.DataFrame, step_ms: dict, near: bool,
           th: Thresholds) -> Finding | None:
    used = steps[steps["used"].astype(bool)]
    if used.empty:
        return None
    n = len(used)
    calls = (used["malloc_calls"] + used["free_calls"]).to_numpy(float)
    if calls.sum() / n < th.allocator_churn_min_calls:
        return None
    call_ms = float((used["malloc_ns"] + used["free_ns"]).sum()) / n / 1e6
    idle_ms = float(used["idle_ns"].sum()) / n / 1e6
    step_mean_ms = float(used["step_ns"].mean()) / 1e6
    if max(call_ms, idle_ms) < MIN_COST_FRAC * step_mean_ms:  # the cache growing: no cost
        return None
    emptied = int(((used["free_calls"] >= 2) & (used["malloc_calls"] >= 2)).sum())
    every_step = emptied * 2 >= n
    if every_step and not near:
        cause = ("the cache is emptied every step and filled again: torch.cuda.empty_cache() "
                 "(or something calling it) runs in the loop")
        advice = ("Remove torch.cuda.empty_cache() from the training loop: the caching "
                  "allocator reuses its blocks only if it keeps them; cudaFree waits for the "
                  "GPU to drain and each cudaMalloc blocks the host.")
    elif every_step:
        cause = ("near capacity the allocator frees its cached blocks to retry allocations "
                 "that do not fit, and allocates again")
        advice = ("Lower the peak (see the near-capacity or out-of-memory finding) or set "
                  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, so the allocator stops "
                  "freeing and re-allocating its cache every step.")
    else:
        cause = "the allocator asks the driver for memory inside the steps"
        advice = ("Warm the caching allocator up before the measured steps and keep shapes "
                  "stable (pad variable lengths to buckets), so steady steps allocate from "
                  "the cache.")
    frac = idle_ms / step_mean_ms if step_mean_ms > 0 else float("nan")
    median_ms = float(step_ms.get(rank, step_mean_ms))
    f = Finding(
        category="allocator_churn", severity="warning" if frac >= 0.05 else "info", rank=rank,
        message=(f"rank {rank}: {calls.sum() / n:.0f} cudaMalloc/cudaFree calls per step "
                 f"({used['malloc_calls'].mean():.0f} malloc, {used['free_calls'].mean():.0f} "
                 f"free) take {call_ms:.2f} ms of a {median_ms:.2f} ms step and stall the "
                 f"GPU for {idle_ms:.2f} ms: {cause}"),
        recommendation=advice,
        evidence={"calls_per_step": round(calls.sum() / n, 2),
                  "malloc_per_step": round(float(used["malloc_calls"].mean()), 2),
                  "free_per_step": round(float(used["free_calls"].mean()), 2),
                  "call_ms_per_step": round(call_ms, 3), "idle_ms_per_step": round(idle_ms, 3),
                  "steps_emptied": emptied, "steps": n, "empty_cache": every_step and not near,
                  "fraction": round(frac, 4) if math.isfinite(frac) else None})
    if math.isfinite(frac) and frac > 0:
        f = f.with_saving(frac * median_ms, frac)
    return f


def _oom(row: dict) -> Finding:
    rank, step = int(row["rank"]), int(row["step"])
    tried = float(row["tried_bytes"])
    failed = f" PyTorch tried to allocate {tried / GB:.2f} GB." if math.isfinite(tried) else ""
    last = (f" The last allocation the trace saw was {row['last_alloc_bytes'] / GB:.2f} GB, "
            f"with {row['last_allocated_bytes'] / GB:.1f} GB allocated and "
            f"{row['last_reserved_bytes'] / GB:.1f} GB reserved of "
            f"{row['capacity_bytes'] / GB:.1f} GB."
            if np.isfinite(row["last_alloc_bytes"]) else "")
    live = str(row.get("live") or "")
    said = (f" The job's error: {row['error'][:200]}" if row["error"] else
            " (the trace records the failed allocation)" if row["source"] == "trace" else
            " (no error record: read from the memory climbing to the device's capacity)")
    return Finding(
        category="out_of_memory", severity="critical", rank=rank, step=step,
        message=(f"rank {rank} ran out of GPU memory in step {step}; the step is cut short "
                 "and left out of the timing." + failed + last
                 + (f" Live at its peak: {live}." if live else "") + said),
        recommendation=("Lower the peak below the device: a smaller batch or micro-batch with "
                        "gradient accumulation, activation checkpointing, bf16 activations, "
                        "sharding (FSDP / ZeRO), and PYTORCH_CUDA_ALLOC_CONF="
                        "expandable_segments:True where reserved is far above allocated."),
        evidence={"step": step, "tried_bytes": tried if math.isfinite(tried) else None,
                  "last_alloc_bytes": _plain(row["last_alloc_bytes"]),
                  "last_allocated_bytes": _plain(row["last_allocated_bytes"]),
                  "last_reserved_bytes": _plain(row["last_reserved_bytes"]),
                  "capacity_bytes": _plain(row["capacity_bytes"]), "source": row["source"],
                  "live": live})


def _plain(value):
    value = float(value)
    return value if math.isfinite(value) else None


def fold_memory(findings: list[Finding], idle_code: pd.DataFrame | None = None) -> list[Finding]:
    """One cause, one finding: NVML's ``memory`` finding folds into the same rank's
    ``near_capacity`` or ``out_of_memory`` finding (the allocator's view says what holds the
    peak), and so does the allocator's retrying near capacity (a churn finding that is not
    ``empty_cache``); the ``runtime_calls`` finding whose slow calls are mostly the
    allocator's, and the ``cpu_launch`` finding whose GPU-idle time is mostly inside the
    allocator's calls (``idle_code``), fold into the rank's ``allocator_churn`` finding,
    their evidence kept there."""
    risky = {f.rank: f for f in findings if f.category in ("near_capacity", "out_of_memory")}
    churn = {f.rank: f for f in findings if f.category == "allocator_churn"}
    folded: dict[int, tuple] = {}  # id of a folded finding -> (rank, category it joins)
    for f in findings:
        if f.category == "memory" and f.rank in risky:
            folded[id(f)] = (f.rank, risky[f.rank].category)
        elif f.category == "allocator_churn" and f.rank in risky \
                and not f.evidence.get("empty_cache"):
            folded[id(f)] = (f.rank, risky[f.rank].category)
        elif f.rank in churn and (
                f.category == "runtime_calls" and _mostly_allocator(f)
                or f.category == "cpu_launch" and allocator_idle_share(idle_code, f.rank) > 0.5):
            folded[id(f)] = (f.rank, "allocator_churn")
    joins: dict[tuple, list[Finding]] = {}  # what folds into each (rank, category), in order
    for g in findings:
        if id(g) in folded:
            joins.setdefault(folded[id(g)], []).append(g)
    out = []
    for f in findings:
        if id(f) in folded:
            continue
        extra = {g.category: g.evidence for g in joins.get((f.rank, f.category), ())}
        if extra:
            f = replace(f, evidence={**f.evidence, **extra})
        out.append(f)
    return out


def allocator_idle_share(idle_code: pd.DataFrame | None, rank: int | None,
                         part: str = "cpu_launch") -> float:
    """The share of a rank's GPU-idle time charged to ``part`` (of the code labels
    ``idle_code`` lists) spent inside the allocator's driver calls."""
    if idle_code is None or idle_code.empty or rank is None:
        return 0.0
    mine = idle_code[(idle_code["rank"] == rank) & (idle_code["part"] == part)]
    total = float(mine["idle_ns"].sum())
    inside = mine["code"].astype(str).str.split(" -> ").str[-1].str.startswith(ALLOCATOR_CALLS)
    return float(mine.loc[inside, "idle_ns"].sum()) / total if total > 0 else 0.0


def _mostly_allocator(f: Finding) -> bool:
    calls = f.evidence.get("calls") or {}
    ours = sum(c for n, c in calls.items() if str(n).startswith(ALLOCATOR_CALLS))
    return ours * 2 >= sum(calls.values()) > 0
