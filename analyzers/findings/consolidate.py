"""One cause, one finding: the analyzers' findings made consistent with the charged-time
model, given what fixing each would save, and ordered by it.

- A rank's time is charged once (:mod:`profkit.analyzers.measure.charge`), so each cause gets one
  finding per rank, from the breakdown. The kernel analyzer's launch statistics become
  evidence of the cpu_launch finding, not a second finding about the same idle time; without
  a cpu_launch finding (the host keeps up) they are no finding at all.
- Slow runtime calls (allocations, graph instantiation) are kept only for the GPU-idle time
  spent inside them (``idle_code``).
- MFU, precision, fusion and memory-bound advice makes a step shorter only when compute is
  what bounds it: kept for ranks whose verdict is compute, dropped where the cause is data
  loading, host syncs, transfers or launches. On ranks whose kernel time is mostly
  memory-bound (the roofline), compute advice speaks of memory-bound work, not tensor cores
  (:func:`profkit.analyzers.findings.roofline.memory_advice`).
- Nsight Compute's ``tensor_cores`` finding measures what the trace's ``precision`` finding
  infers (GEMMs without tensor cores): where both exist it becomes that finding's evidence.
- A blocking sync and the host work on its result are one round trip: one finding, one
  saving (``_round_trips``).
- A host wait that is mostly ops setting up for new input shapes (cuDNN plans, GEMM
  algorithm choice) is one finding with advice for fewer shapes, not CUDA graphs
  (:mod:`profkit.analyzers.findings.shapesetup`).
- Compilation inside the steps (recompiles) saves its compile time per step it happened in,
  at most those steps' time: the steps are left out of the verdict, so not per used step.
- Every actionable finding carries ``estimated_saving`` (:mod:`profkit.analyzers.findings.savings`;
  a judge's own estimate, ``saving_ns_per_step`` in its evidence, is capped here by the
  finding's share of the step and the rank's charged compute time);
  findings of the verdict's cause come first, then by saving, then by severity.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
from profkit.analyzers.findings import compiled
from profkit.analyzers.findings.experts import fold_straggler
from profkit.analyzers.findings.inference import fold_phases
from profkit.analyzers.findings.memoryjoin import join_headroom
from profkit.analyzers.findings.memoryrisks import fold_memory
from profkit.analyzers.findings.roofline import memory_advice
from profkit.analyzers.findings.savings import (
    OVERLAP_SAVING,
    SAVING_PARTS,
    as_fraction,
    part_savings,
    rank_means,
)
from profkit.analyzers.findings.shapesetup import shape_setup_host
from profkit.analyzers.findings.sharding import fold_units
from profkit.analyzers.findings.straggler_saving import straggler_saving
from profkit.analyzers.findings.tensor_parallel import tp_communication
from profkit.analyzers.findings.trust import saving_beyond_step
from profkit.analyzers.findings.zero3 import zero3_host
from profkit.analyzers.parts import HOST_IDLE, HOST_SIDE
from profkit.analyzers.result import SEVERITIES, Finding

LAUNCH_EVIDENCE = ("short_frac", "kernels", "launch_calls", "launch_time_frac",
                   "launch_median_ns", "max_queue_depth", "graph_launches")
COMPUTE_ONLY = ("mfu", "precision", "fusion", "memory_bound", "recompute", "fp8")
MIN_SAVING_FRAC = 0.01  # a finding that would save less than this of the step is not advice


def consolidate(findings: list[Finding], tables: dict[str, pd.DataFrame],
                verdict: dict, settings: dict | None = None) -> list[Finding]:
    """``settings``: run.json's ``torch_settings`` (PyTorch's backend switches), if any."""
    ranks = tables.get("rank_breakdown", pd.DataFrame())
    means = rank_means(tables.get("step_breakdown", pd.DataFrame()))
    rank_ids = ranks["rank"].tolist() if len(ranks) else []  # (itertuples: ~0.5 ms a call)
    steps = {int(r): int(n) for r, n in zip(rank_ids, ranks["steps"].tolist())} \
        if len(ranks) else {}
    saving = part_savings(means, ranks, tables.get("transfers"), steps) if len(means) else {}
    primary = dict(zip(rank_ids, ranks["primary"].tolist())) if len(ranks) else {}
    median_step = dict(zip(rank_ids, ranks["step_time_ms"].tolist())) if len(ranks) else {}
    launch = {f.rank: f for f in findings if f.category == "launch"}
    findings = fold_straggler(fold_measured(findings))  # expert imbalance: one finding
    findings = fold_memory(findings, tables.get("idle_code"))
    findings = memory_advice(findings, tables.get("roofline"))
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
    out = [_within_compute(f, means) for f in out]
    out = join_headroom(out, ranks)
    out = fold_units(_round_trips(_code_into_cause(out)))  # FSDP wrapping: one finding
    out = tp_communication(out, tables.get("tp_ranks"))  # TP advice for TP collectives
    out = zero3_host(out, tables.get("zero3_ranks"))  # ZeRO-3's hooks: one host finding
    out = shape_setup_host(out, tables.get("shape_setup"), means, steps, median_step,
                           _setting(settings, "cudnn_benchmark"))
    out = fold_phases(out, tables)  # inference: the phase split of host-side findings
    out = compiled.reword(out, tables.get("used_step_kernels"))  # no compile advice if compiled
    return order([_trusted_saving(f) for f in out],
                 verdict.get("primary"))


def _setting(settings: dict | None, name: str) -> bool | None:
    """A recorded switch (run.json's ``torch_settings``), None where absent or not a bool."""
    value = settings.get(name) if isinstance(settings, dict) else None
    return value if isinstance(value, bool) else None


MEMORY_BOUND_WORDS = "of the step is memory-bound kernels"


def _within_compute(f: Finding, means: pd.DataFrame) -> Finding:
    """A memory-bound finding says its share is part of the rank's compute (one statement,
    not a second cause beside the verdict's compute share, issue 42): ``rank 0: 41% of the
    step is memory-bound kernels, within its 92% in compute``, the compute share rounded as
    the verdict rounds it."""
    if f.category != "memory_bound" or f.rank not in means.index \
            or MEMORY_BOUND_WORDS not in f.message:
        return f
    row = means.loc[f.rank]
    if not row["step_ns"]:
        return f
    compute = float(row["compute"]) / float(row["step_ns"])
    return replace(f, message=f.message.replace(
        MEMORY_BOUND_WORDS, f"{MEMORY_BOUND_WORDS}, within its {compute:.0%} in compute", 1))


def _code_into_cause(findings: list[Finding]) -> list[Finding]:
    """The code the GPU waits on is evidence of its cause's finding, not a finding of its own
    (one cause, one finding): an idle_code finding folds into the same rank's finding of its
    part, whose figures (the part's whole charged time) it must not contradict."""
    causes = {(f.rank, f.category): f for f in findings if f.category != "idle_code"}
    folded = {}
    for f in findings:
        key = (f.rank, f.evidence.get("part"))
        if f.category == "idle_code" and key in causes:
            folded[key] = f
    out = []
    for f in findings:
        if f.category == "idle_code" and (f.rank, f.evidence.get("part")) in folded:
            continue
        code = folded.get((f.rank, f.category))
        if code is not None:
            f = replace(f, evidence={**f.evidence, "code": code.evidence["code"],
                                     "code_idle_ms_per_step": code.evidence["idle_ms_per_step"]})
        out.append(f)
    return out


def _round_trips(findings: list[Finding]) -> list[Finding]:
    """A blocking sync and the host work on its result are one round trip: where a rank's
    host-side finding is mostly work right after syncs, its host_sync finding folds into it,
    with one saving (the two parts' savings added, as fractions of the same step)."""
    trips = {f.rank: f for f in findings if f.category in HOST_SIDE
             and f.evidence.get("after_sync_share", 0) > 0.5 and f.estimated_saving}
    syncs = {f.rank: f for f in findings if f.category == "host_sync" and f.rank in trips
             and f.estimated_saving}
    out = []
    for f in findings:
        if f.category == "host_sync" and f.rank in syncs:
            continue
        if f.rank in syncs and f is trips[f.rank]:
            sync = syncs[f.rank]
            a, b = f.estimated_saving, sync.estimated_saving
            f = replace(f, message=f.message + _round_trip_words(sync, a, b),
                        evidence={**f.evidence,
                                  "round_trip_sync_ms_per_step": sync.evidence.get("ms_per_step"),
                                  "round_trip_sync_fraction": sync.evidence.get("fraction")})
            f = f.with_saving(a["ms_per_step"] + b["ms_per_step"], a["fraction"] + b["fraction"])
        out.append(f)
    return out


def _round_trip_words(sync: Finding, a: dict, b: dict) -> str:
    """The folded finding names what its saving is for: the round trip, syncs included
    (issue 40: "16% of step time is host work" carried the round trip's 83%)."""
    frac = sync.evidence.get("fraction")
    blocked = f" ({frac:.0%} of the step)" if isinstance(frac, (int, float)) else ""
    return (f"; with the blocking syncs before it{blocked}, one round trip of "
            f"{a['fraction'] + b['fraction']:.0%} of the step")


def _trusted_saving(f: Finding) -> Finding:
    """A saving larger than its step, or not a time, is dropped: the finding's evidence says
    why instead (profkit.analyzers.findings.trust)."""
    if not f.estimated_saving:
        return f
    ms, frac = f.estimated_saving["ms_per_step"], f.estimated_saving["fraction"]
    step_ms = ms / frac if math.isfinite(frac) and frac > 0 else float("nan")
    why = saving_beyond_step(ms, step_ms)
    if why is None:
        return f
    return replace(f, estimated_saving=None, evidence={**f.evidence, "saving_untrusted": why})


def fold_measured(findings: list[Finding]) -> list[Finding]:
    """The ``tensor_cores`` finding (counters) as evidence of the ``precision`` findings
    (trace) when both exist: one cause, one finding."""
    measured = next((f for f in findings if f.category == "tensor_cores"), None)
    if measured is None or not any(f.category == "precision" for f in findings):
        return findings
    ev = measured.evidence

    def pct(key: str) -> str:
        v = ev.get(key)
        return f"{v:.0f}%" if isinstance(v, (int, float)) and math.isfinite(v) else "-"

    said = (f" Nsight Compute measured it: {ev.get('first_short_name')} keeps the FP32 FMA pipe "
            f"{pct('first_fma_pct')} busy and the tensor pipe {pct('first_tensor_pct')}.")
    return [replace(f, message=f.message + said, evidence={**f.evidence, "ncu": ev})
            if f.category == "precision" else f
            for f in findings if f.category != "tensor_cores"]


def _compute_bound(f: Finding, primary: dict) -> bool:
    if f.rank is None:  # run-wide (fusion over all ranks, MFU notes): compute-bound somewhere
        return f.severity == "info" and f.category == "mfu" or "compute" in primary.values()
    return primary.get(f.rank) == "compute"


GRAPHS_IN_USE_ADVICE = (
    "The step already replays CUDA graphs: capture more of it in them (the launches between "
    "replays), fuse what is left with torch.compile, or move host work between replays off "
    "the critical path.")


def _with_launch_stats(f: Finding, stats: Finding) -> Finding:
    extra = {k: stats.evidence[k] for k in LAUNCH_EVIDENCE if k in stats.evidence}
    f = replace(f, evidence={**f.evidence, "launch": extra})
    if extra.get("graph_launches") and "CUDA graphs" in f.recommendation:
        f = replace(f, recommendation=GRAPHS_IN_USE_ADVICE)  # never advise what is in use
    return f


def _estimate(f: Finding, saving: dict, means: pd.DataFrame,
              tables: dict[str, pd.DataFrame], steps: dict[int, int],
              median_step: dict[int, float]) -> Finding | None:
    if f.rank is not None and f.category in SAVING_PARTS and f.rank in means.index:
        ns = saving.get((f.rank, f.category), 0.0)
        overlap = saving.get((f.rank, f.category + OVERLAP_SAVING))
        if overlap is not None:  # the part's rule has a second way out (memcpy: overlap it)
            f = replace(f, evidence={**f.evidence, "overlap_saving_ms": round(overlap / 1e6, 3)})
        # never more than the charged time of the cause (the finding's own fraction)
        return _with_saving(f, ns, means, median_step, cap=f.evidence.get("fraction"))
    if f.rank is not None and "saving_ns_per_step" in f.evidence and f.rank in means.index:
        row = means.loc[f.rank]
        compute = float(row["compute"]) / float(row["step_ns"]) if row["step_ns"] else 0.0
        cap = min(float(f.evidence.get("fraction", 1.0)), compute)
        return _with_saving(f, float(f.evidence["saving_ns_per_step"]), means, median_step,
                            cap=cap)
    if f.category == "straggler":  # its lateness once its own step is fixed
        return straggler_saving(with_host_lateness(f, tables))
    if f.category == "compile":
        return _compile_saving(f)
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


def _compile_saving(f: Finding) -> Finding:
    """Recompiles (compiling in two steps or more) would save their compile time per step
    they happened in, never more than those steps took; a single compile, a warm-up the
    profiler caught, saves the job nothing: no estimate."""
    if len(f.evidence.get("compiling_steps") or []) < 2:
        return f
    step_ms = float(f.evidence.get("compiling_step_ms") or 0.0)
    ms = min(float(f.evidence.get("compile_ms_per_step") or 0.0), step_ms)
    return f.with_saving(ms, as_fraction(ms, step_ms), per="compiling step")


HOST_IDLE_PARTS = HOST_IDLE  # the parts in which the GPU idles on its own host


def with_host_lateness(f: Finding, tables: dict[str, pd.DataFrame]) -> Finding:
    """A straggler whose own GPU idles on its host longer than the others' (by at least a
    quarter of what they wait for it): the excess in ms per step and the code that fills it,
    in the evidence and the advice."""
    ranks, code = tables.get("rank_breakdown", pd.DataFrame()), tables.get("idle_code")
    if ranks.empty or f.rank not in set(ranks["rank"]) or len(ranks) < 2:
        return f
    host_ms = ranks[list(HOST_IDLE_PARTS)].sum(axis=1) * ranks["step_time_ms"]
    mine = float(host_ms[ranks["rank"] == f.rank].iloc[0])
    excess = mine - float(host_ms[ranks["rank"] != f.rank].median())
    wait_ms = (f.evidence.get("others_exposed_wait_ns_per_step") or 0.0) / 1e6
    if excess < max(0.25 * wait_ms, 0.05):
        return f
    n = max(int(ranks.loc[ranks["rank"] == f.rank, "steps"].iloc[0]), 1)
    top = [] if code is None or code.empty else (
        code[(code["rank"] == f.rank) & code["part"].isin(HOST_IDLE_PARTS)]
        .nlargest(2, "idle_ns").to_dict("records"))
    where = "; ".join(f"{r['code']} ({r['idle_ns'] / n / 1e6:.2f} ms/step)" for r in top)
    advice = (f" Its host is the cause: its GPU waits {excess:.2f} ms/step longer than the "
              "others' for its host" + (f", in {where}" if where else "") +
              ": make that host work cheaper or move it off the critical path.")
    return replace(f, evidence={**f.evidence, "host_excess_ms_per_step": round(excess, 3),
                                "host_code": where},
                   recommendation=f.recommendation + advice)


def _runtime_saving(f: Finding, means: pd.DataFrame, median_step: dict[int, float],
                    code: pd.DataFrame, n_steps: int) -> Finding | None:
    """GPU-idle ns per step spent inside the slow calls the finding names, at most the time
    the calls themselves took; none: no finding."""
    calls = tuple((f.evidence.get("calls") or {}).keys())
    if code.empty or not calls:
        return None
    mine = code.iloc[np.flatnonzero(code["rank"].to_numpy() == f.rank)]  # (rank first: cheap)
    mine = mine[mine["code"].str.endswith(calls)]
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
