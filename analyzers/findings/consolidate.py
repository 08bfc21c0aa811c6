"""One cause, one finding: the analyzers' findings made consistent with the charged-time
model, given what fixing each would save, and ordered by it.

- A rank's time is charged once (:mod:`profkit.analyzers.measure.charge`), so each cause gets one
  finding per rank, from the breakdown. The kernel analyzer's launch statistics become
  evidence of the cpu_launch finding, not a second finding about the same idle time; without
  a cpu_launch finding (the host keeps up) they are no finding at all.
- Slow runtime calls (allocations, graph instantiation) are kept only for the GPU-idle time
  spent inside them (``idle_code``).
- MFU, precision and fusion advice makes a step shorter only when compute is what bounds
  it: kept for ranks whose verdict is compute, dropped where the cause is data loading, host
  syncs, transfers or launches.
- Every actionable finding carries ``estimated_saving`` (:mod:`profkit.analyzers.findings.savings`);
  findings of the verdict's cause come first, then by saving, then by severity.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
from profkit.analyzers.findings.savings import SAVING_PARTS, as_fraction, part_savings, rank_means
from profkit.analyzers.result import SEVERITIES, Finding

LAUNCH_EVIDENCE = ("short_frac", "kernels", "launch_calls", "launch_time_frac",
                   "launch_median_ns", "max_queue_depth", "graph_launches")
COMPUTE_ONLY = ("mfu", "precision", "fusion")
MIN_SAVING_FRAC = 0.01  # a finding that would save less than this of the step is not advice


def consolidate(findings: list[Finding], tables: dict[str, pd.DataFrame],
                verdict: dict) -> list[Finding]:
    ranks = tables.get("rank_breakdown", pd.DataFrame())
    means = rank_means(tables.get("step_breakdown", pd.DataFrame()))
    steps = {int(r): int(n) for r, n in ranks[["rank", "steps"]].itertuples(index=False)} \
        if len(ranks) else {}
    saving = part_savings(means, ranks, tables.get("transfers"), steps) if len(means) else {}
    primary = dict(ranks[["rank", "primary"]].itertuples(index=False)) if len(ranks) else {}
    median_step = dict(ranks[["rank", "step_time_ms"]].itertuples(index=False)) \
        if len(ranks) else {}
    launch = {f.rank: f for f in findings if f.category == "launch"}
    out = []
    for f in findings:
        if f.category == "launch":
            continue
        if f.category in COMPUTE_ONLY and not _compute_bound(f, primary):
            continue
        if f.category == "cpu_launch" and f.rank in launch:
            f = _with_launch_stats(f, launch[f.rank])
        f = _estimate(f, saving, means, tables, steps, median_step)
        if f is not None:
            out.append(f)
    return order(out, verdict.get("primary"))


def _compute_bound(f: Finding, primary: dict) -> bool:
    if f.rank is None:  # run-wide (fusion over all ranks, MFU notes): compute-bound somewhere
        return f.severity == "info" and f.category == "mfu" or "compute" in primary.values()
    return primary.get(f.rank) == "compute"


def _with_launch_stats(f: Finding, stats: Finding) -> Finding:
    extra = {k: stats.evidence[k] for k in LAUNCH_EVIDENCE if k in stats.evidence}
    return replace(f, evidence={**f.evidence, "launch": extra})


def _estimate(f: Finding, saving: dict, means: pd.DataFrame,
              tables: dict[str, pd.DataFrame], steps: dict[int, int],
              median_step: dict[int, float]) -> Finding | None:
    if f.rank is not None and f.category in SAVING_PARTS and f.rank in means.index:
        ns = saving.get((f.rank, f.category), 0.0)
        if f.category == "memcpy":
            overlap = saving.get((f.rank, "memcpy_overlap"), 0.0)
            f = replace(f, evidence={**f.evidence, "overlap_saving_ms": round(overlap / 1e6, 3)})
        # never more than the charged time of the cause (the finding's own fraction)
        return _with_saving(f, ns, means, median_step, cap=f.evidence.get("fraction"))
    if f.category == "straggler":
        wait = f.evidence.get("others_exposed_wait_ns_per_step") or 0.0
        step = f.evidence.get("others_step_ns") or 0.0
        return f.with_saving(wait / 1e6, as_fraction(wait, step))
    if f.category == "runtime_calls" and f.rank in means.index:
        return _runtime_saving(f, means, median_step, tables.get("idle_code", pd.DataFrame()),
                               steps.get(f.rank, 1))
    return f


def _with_saving(f: Finding, ns: float, means: pd.DataFrame, median_step: dict[int, float],
                 cap: float | None = None) -> Finding:
    """``f`` saving ``ns`` per used step (a mean over the rank's used steps), as a fraction of
    its mean used step, at most ``cap``; in ms of the rank's median used step, the one step
    time every per-step figure of the report is given in."""
    frac = as_fraction(ns, float(means.loc[f.rank, "step_ns"]))
    if cap is not None and math.isfinite(frac):
        frac = min(frac, float(cap))
    step_ms = median_step.get(f.rank, float(means.loc[f.rank, "step_ns"]) / 1e6)
    return f.with_saving(frac * step_ms if math.isfinite(frac) else ns / 1e6, frac)


def _runtime_saving(f: Finding, means: pd.DataFrame, median_step: dict[int, float],
                    code: pd.DataFrame, n_steps: int) -> Finding | None:
    """GPU-idle ns per step spent inside the slow calls the finding names, at most the time
    the calls themselves took; none: no finding."""
    calls = tuple((f.evidence.get("calls") or {}).keys())
    if code.empty or not calls:
        return None
    mine = code[(code["rank"] == f.rank) & code["code"].str.endswith(calls)]
    step = float(means.loc[f.rank, "step_ns"])
    ns = float(mine["idle_ns"].sum()) / max(n_steps, 1)
    if ns < MIN_SAVING_FRAC * step:
        return None
    return _with_saving(f, ns, means, median_step, cap=f.evidence.get("slow_frac"))


def order(findings: list[Finding], primary: str | None) -> list[Finding]:
    """The verdict's cause first, then the largest estimated saving, then severity."""
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}

    def key(f: Finding):
        cause = f.category == primary or (f.category == "straggler")
        ms = (f.estimated_saving or {}).get("ms_per_step")
        ms = ms if ms is not None and math.isfinite(ms) else -1.0
        return (not cause, -ms, rank[f.severity], -1 if f.rank is None else f.rank)

    return sorted(findings, key=key)
