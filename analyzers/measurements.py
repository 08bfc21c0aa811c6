"""The registry of measurements: each one's per-rank step (map), its cross-rank combine
(reduce) and its judge, in one line of :data:`MEASUREMENTS`.

A rank's :class:`~profkit.analyzers.summaries.RankSummary` holds one value per entry with a
per-rank step (:func:`~profkit.analyzers.summaries.summarize_rank` runs them in registry
order); :func:`~profkit.analyzers.analyze.combine` runs the combines and judges the results
in registry order (:func:`combine_all`, :func:`judge_all`); the report shows each entry's
tables through :data:`profkit.analyzers.report.sections.SHOWN`, keyed by the same names.

Dependencies are named, not positional: an entry's ``needs`` are the entries whose per-rank
values (before it in the registry) or combined results (run first, whatever their place)
it reads. Registry order is the order of the findings and of the tables, so it is part of
the output: a new entry goes where its findings and tables should appear.

Names are what each entry measures: ``efficiency`` holds NVML's clocks, power and peak
memory (the findings' category ``memory`` is that peak), so a future measurement of the
GPU memory the trace allocates should be named ``allocations``, not ``memory``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pandas as pd
from profkit.analyzers.findings import trust
from profkit.analyzers.findings.allocations import allocation_findings
from profkit.analyzers.findings.attention import attention_findings
from profkit.analyzers.findings.comms import (
    collective_findings,
    group_findings,
    link_findings,
    straggler_findings,
)
from profkit.analyzers.findings.efficiency import judge_efficiency
from profkit.analyzers.findings.experts import expert_findings
from profkit.analyzers.findings.fp8 import fp8_findings
from profkit.analyzers.findings.inference import inference_findings
from profkit.analyzers.findings.kernels import kernel_findings, no_gpu_findings
from profkit.analyzers.findings.memoryrisks import allocator_findings
from profkit.analyzers.findings.ncu import ncu_findings
from profkit.analyzers.findings.pipeline import pipeline_findings
from profkit.analyzers.findings.recompute import recompute_findings
from profkit.analyzers.findings.roofline import roofline_findings
from profkit.analyzers.findings.sharding import fsdp_findings
from profkit.analyzers.findings.tensor_parallel import tp_findings
from profkit.analyzers.measure import (
    allocations,
    allocator,
    breakdown,
    comms,
    efficiency,
    experts,
    fp8,
    fsdp_units,
    groups,
    health,
    inference,
    kernels,
    layout,
    links,
    ncu,
    peaklive,
    pipeline,
    recompute,
    roofline,
    stragglers,
    tensor_parallel,
    transfers,
    zero3,
)
from profkit.analyzers.measure import attention as hand_attention
from profkit.analyzers.options import AnalysisOptions
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

from profkit.model import RankData

ALL, GPU, CPU = "all", "gpu", "cpu"  # which ranks run a per-rank step (CPU: no GPU events)
NO_GPU = "no_gpu"  # the topic of a GPU measurement's result in a run without GPU events


@dataclass
class RankInputs:
    """What a per-rank step reads: the rank's events, run.json's facts, the options, and
    the values of the entries before it (``values``, by name)."""

    data: RankData
    run_meta: dict[str, Any]
    thresholds: Thresholds
    opts: AnalysisOptions
    steps_info: dict[str, Any]  # where the steps come from (summaries.step_source)
    values: dict[str, Any] = field(default_factory=dict)
    _used: tuple | None = field(default=None, init=False, repr=False)  # (breakdown, its steps)

    def used_steps(self) -> dict[int, int] | None:
        """{step: ns} of the steps the verdict reads (from the breakdown's step table), read
        once per breakdown (a dozen measurements ask); each caller gets its own dict."""
        parts = self.values["breakdown"]
        if self._used is None or self._used[0] is not parts:
            self._used = (parts, used_steps(parts))
        return None if self._used[1] is None else dict(self._used[1])


@dataclass
class Combining:
    """What a combine reads besides its own summaries' values: the run's header, every
    rank's header facts, the thresholds, and the results combined so far (``results``,
    by name). ``notes`` gathers the figures dropped for breaking physics (findings/trust.py)."""

    header: Any  # analyze.RunHeader: path, meta, skipped, notes, ncu
    metas: dict[int, dict]  # every rank's trimmed header facts, by rank
    thresholds: Thresholds
    results: dict[str, Result] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @cached_property
    def link_peak(self) -> tuple[float, str]:
        """The GPU link the collectives run over: (GB/s, its name); NaN across hosts."""
        return links.link_peak(self.header.meta, self.metas)


Step = Callable[[RankInputs], Any]
Combine = Callable[[dict[int, Any], Combining], Result]
Judge = Callable[[Result, Thresholds], list[Finding]]


@dataclass(frozen=True)
class Measurement:
    """One measurement. ``per_rank``: its map step, run on the ranks ``ranks`` names (the
    others get None); ``combine``: its reduce, given {rank: per-rank value} of the ranks
    with a timeline that ran the step; ``judge``: the findings its result supports (called
    when the result names a topic); ``needs``: the entries it reads (module doc)."""

    name: str
    per_rank: Step | None = None
    ranks: str = ALL
    combine: Combine | None = None
    judge: Judge | None = None
    needs: tuple[str, ...] = ()

    def runs_on(self, has_gpu: bool) -> bool:
        """Whether the per-rank step runs on a rank with (or without) GPU events."""
        return self.per_rank is not None and (
            self.ranks == ALL or (self.ranks == GPU) == has_gpu)


def used_steps(parts: dict[str, Any]) -> dict[int, int] | None:
    """{step: ns} of the steps the verdict reads (None when the rank has no step table)."""
    steps = parts.get("step_breakdown")
    if steps is None or steps.empty:
        return None
    used = steps[steps["used"].astype(bool) & (steps["step"] >= 0)]
    return {int(s): int(ns) for s, ns in zip(used["step"], used["step_ns"])}


# --- per-rank steps ---------------------------------------------------------------------

def _rank_breakdown(r: RankInputs) -> dict[str, Any]:
    oom = allocator.rank_oom(r.data, r.run_meta, r.thresholds.peak_memory_frac)
    parts = breakdown.rank_parts(r.data, r.opts, r.thresholds,
                                 cut_step=oom["step"] if oom else None)
    parts["steps_info"] = r.steps_info
    return parts


def _rank_kernels(r: RankInputs) -> dict[str, Any]:
    return kernels.rank_kernel_parts(r.data.rank, r.data, r.thresholds, r.used_steps())


def _rank_roofline(r: RankInputs) -> dict[str, Any]:
    return roofline.rank_roofline(r.data.rank, r.data, r.run_meta, r.used_steps(), r.thresholds)


# --- combines ---------------------------------------------------------------------------

def _collectives(values: dict[int, Any], ctx: Combining) -> Result:
    """Collectives matched across ranks; bus bandwidths beyond the link are dropped."""
    coll = comms.match_collectives(list(values.values()),
                                   comms.rank_hosts(ctx.header.meta, ctx.metas))
    ctx.notes += trust.collectives_within_link(coll.tables, ctx.link_peak[0])
    return coll


def _layout(values: dict[int, Any], ctx: Combining) -> Result:
    """Process groups, their parallel dimension and the exposed communication of each."""
    world = max([len(values)] + [int((m.get("distributed") or {}).get("world_size") or 0)
                                 for m in ctx.metas.values()])
    return layout.combine_layout(values, world)


def _stragglers(values: dict[int, Any], ctx: Combining) -> Result:
    """Late ranks, excused where their slow process group explains the lateness."""
    coll, th = ctx.results["collectives"], ctx.thresholds
    late = stragglers.judge_stragglers(coll, values, th, ctx.results["layout"].facts)
    return stragglers.excuse_slow_groups(late, coll, ctx.results["groups"], th)


def _efficiency(values: dict[int, Any], ctx: Combining) -> Result:
    """MFU, utilisation and NVML per rank; figures beyond the device's peak are dropped."""
    used = efficiency.combine_efficiency(list(values.values()), ctx.thresholds)
    ctx.notes += trust.efficiency_within_peak(used)
    return used


def _roofline(values: dict[int, Any], ctx: Combining) -> Result:
    """Kernels against their roof; NVML's clocks (efficiency) say what the roof was."""
    return roofline.combine_roofline([v for v in values.values() if v],
                                     ctx.results["efficiency"].tables["nvml"], ctx.thresholds)


def _ncu(values: dict[int, Any], ctx: Combining) -> Result:
    """Nsight Compute's counters (profkit ncu) beside the kernels and their estimates."""
    return ncu.join_counters(ctx.results["kernels"].tables["top_kernels"], ctx.header.ncu,
                             ctx.results["roofline"].tables.get("roofline"), ctx.thresholds)


def _transfers(values: dict[int, Any], ctx: Combining) -> Result:
    """Copies by direction with their link's peak; rates beyond it are dropped."""
    frames = [v for v in values.values() if v is not None and len(v)]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    moved = transfers.add_peaks(table, ctx.metas, ctx.header.meta)
    ctx.notes += trust.transfers_within_link(moved)
    return Result(tables={"transfers": moved})


def _tensor_parallel(values: dict[int, Any], ctx: Combining) -> Result:
    """TP collectives per rank, their waits from the matched collectives, against the step."""
    ranks = ctx.results["breakdown"].tables.get("rank_breakdown", pd.DataFrame())
    step_ms = dict(zip(ranks["rank"], ranks["step_time_ms"])) if len(ranks) else {}
    return tensor_parallel.combine_tp(values, ctx.results["collectives"], step_ms)


def _rank_allocator(r: RankInputs) -> dict[str, Any]:
    return allocator.rank_allocator(r.data, r.values["breakdown"]["step_breakdown"],
                                    r.run_meta, r.thresholds.peak_memory_frac)


def _allocator(values: dict[int, Any], ctx: Combining) -> Result:
    """Allocator churn and out-of-memory, judged with the peaks (allocations) and what
    holds them (peak_live)."""
    tables = allocator.combine_allocator(list(values.values()))
    ranks = ctx.results["allocations"].tables.get("memory_ranks", pd.DataFrame())
    live = ctx.results["peak_live"].tables
    steps = ctx.results["breakdown"].tables.get("rank_breakdown", pd.DataFrame())
    step_ms = dict(zip(steps["rank"], steps["step_time_ms"])) if len(steps) else {}
    has = len(ranks) or len(tables["memory_oom"]) or tables["allocator_calls"]["malloc_calls"].sum()
    return Result(tables=tables, facts={
        **({"topic": "allocator"} if has else {}), "ranks": ranks,
        "live": live["memory_live"], "peak": live["memory_peak"], "step_ms": step_ms})


# Registry order is output order: the findings of results after the breakdown, and the
# tables of Analysis.tables (and of --tables), follow it.
MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement("breakdown", _rank_breakdown,
                combine=lambda v, ctx: breakdown.combine_breakdown(list(v.values()))),
    Measurement("collectives", lambda r: comms.rank_collectives(r.data),
                combine=_collectives, judge=collective_findings),
    Measurement("layout", lambda r: layout.rank_layout(r.data, r.used_steps()),
                combine=_layout, needs=("breakdown",)),
    Measurement("stragglers", lambda r: stragglers.rank_step_stats(r.data),
                combine=_stragglers, judge=straggler_findings,
                needs=("collectives", "groups", "layout")),
    Measurement("pipeline", lambda r: pipeline.rank_pipeline(r.data, r.used_steps()),
                combine=lambda v, ctx: pipeline.combine_pipeline(
                    v, ctx.results["breakdown"].tables["step_breakdown"]),
                judge=pipeline_findings, needs=("breakdown",)),
    Measurement("links", combine=lambda v, ctx: links.judge_links(
        ctx.results["collectives"], ctx.link_peak, ctx.thresholds),
                judge=link_findings, needs=("collectives",)),
    Measurement("groups", combine=lambda v, ctx: groups.find_slow_groups(
        ctx.results["collectives"], ctx.thresholds, ctx.results["layout"].facts),
                judge=group_findings, needs=("collectives", "layout")),
    Measurement("experts", lambda r: experts.rank_all_to_all(r.data, r.used_steps()), GPU,
                combine=lambda v, ctx: experts.expert_balance(v, ctx.results["stragglers"]),
                judge=expert_findings, needs=("breakdown", "stragglers")),
    Measurement("fsdp", lambda r: fsdp_units.rank_fsdp_units(r.data, r.used_steps(),
                                                             r.values["breakdown"]), GPU,
                combine=lambda v, ctx: fsdp_units.combine_fsdp_units(v, ctx.results["collectives"]),
                judge=fsdp_findings, needs=("breakdown", "collectives")),
    # DeepSpeed ZeRO-3 from its hooks' autograd Functions: its collectives per step, no judge
    Measurement("zero3", lambda r: zero3.rank_zero3(r.data, r.used_steps(), r.values["breakdown"]),
                combine=lambda v, ctx: zero3.combine_zero3(v), needs=("breakdown",)),
    Measurement("tensor_parallel", lambda r: tensor_parallel.tp_collectives(r.data, r.used_steps()),
                GPU, combine=_tensor_parallel, judge=tp_findings,
                needs=("breakdown", "collectives")),
    Measurement("kernels", _rank_kernels, GPU,
                combine=lambda v, ctx: kernels.combine_kernels(list(v.values()), ctx.thresholds),
                judge=kernel_findings, needs=("breakdown",)),
    Measurement("efficiency", lambda r: efficiency.rank_efficiency(r.data.rank, r.data,
                                                                   r.run_meta),
                GPU, combine=_efficiency, judge=judge_efficiency),
    Measurement("roofline", _rank_roofline, GPU, combine=_roofline, judge=roofline_findings,
                needs=("breakdown", "efficiency")),
    # fp8 GEMMs' quantisation overhead; what fp8 would give a bf16 step
    Measurement("fp8", lambda r: fp8.rank_fp8(r.data, r.used_steps(), r.run_meta), GPU,
                combine=lambda v, ctx: fp8.combine_fp8(list(v.values())), judge=fp8_findings,
                needs=("breakdown",)),
    # attention written by hand (matmul, mask, softmax, matmul): what SDPA would save
    Measurement("attention", lambda r: hand_attention.rank_attention(
                    r.data, r.used_steps(), r.run_meta), GPU,
                combine=lambda v, ctx: hand_attention.combine_attention(list(v.values())),
                judge=attention_findings, needs=("breakdown",)),
    Measurement("ncu", combine=_ncu, judge=ncu_findings, needs=("kernels", "roofline")),
    Measurement("transfers", lambda r: transfers.rank_transfers(r.data, bool(len(r.data.steps))),
                GPU, combine=_transfers),
    Measurement("allocations", lambda r: allocations.rank_allocations(
                    r.data, r.used_steps(), r.run_meta),
                GPU, combine=lambda v, ctx: allocations.combine_allocations(list(v.values())),
                judge=allocation_findings, needs=("breakdown",)),
    Measurement("peak_live", lambda r: peaklive.rank_peak_live(r.data, r.used_steps()), GPU,
                combine=lambda v, ctx: Result(tables=peaklive.combine_peak_live(
                    list(v.values()))), needs=("breakdown",)),
    Measurement("allocator", _rank_allocator, GPU, combine=_allocator,
                judge=allocator_findings, needs=("breakdown", "allocations", "peak_live")),
    # forward ops run again in the backward pass; its memory cost from the allocator's peaks
    Measurement("recompute", lambda r: recompute.rank_recompute(r.data, r.used_steps()), GPU,
                combine=lambda v, ctx: recompute.combine_recompute(
                    list(v.values()), ctx.results["allocations"].tables.get("memory_ranks")),
                judge=recompute_findings, needs=("breakdown", "allocations")),
    # inference: prefill and decode forwards, time to first token and per token, roofs
    Measurement("inference", lambda r: inference.rank_inference(r.data, r.used_steps(),
                                                                r.run_meta), GPU,
                combine=lambda v, ctx: inference.combine_inference(v), judge=inference_findings,
                needs=("breakdown",)),
    # CPU op totals of ranks without GPU events: analyze._cpu_only combines them, as the
    # one thing a run without GPU events shows
    Measurement("cpu_ops", lambda r: kernels.op_totals(r.data), CPU),
    # ...and their kernel launch calls: launches without a single GPU record are kernel
    # records the trace lost, not a CPU-only job
    Measurement("launch_calls", lambda r: health.kernel_launch_calls(r.data), CPU),
)


def check(registry: tuple[Measurement, ...]) -> None:
    """Raise ValueError for a registry the loops cannot run: a name twice, a need that is
    not registered, a per-rank need registered after its reader, or needs in a cycle."""
    names = [m.name for m in registry]
    if len(set(names)) != len(names):
        raise ValueError(f"measurements registered twice: {sorted(names)}")
    for i, m in enumerate(registry):
        for need in m.needs:
            if need not in names:
                raise ValueError(f"{m.name} needs {need}, which is not registered")
            if m.per_rank and registry[names.index(need)].per_rank and names.index(need) > i:
                raise ValueError(f"{m.name}'s per-rank step needs {need}, registered after it")
    _combine_order(registry)


def _combine_order(registry: tuple[Measurement, ...]) -> list[Measurement]:
    """The entries with a combine, each after the ones it needs, else in registry order."""
    by_name = {m.name: m for m in registry}
    order: list[Measurement] = []

    def visit(m: Measurement, path: tuple[str, ...]) -> None:
        if m.name in path:
            raise ValueError(f"measurements need each other: {' -> '.join((*path, m.name))}")
        if m in order or m.combine is None:
            return
        for need in m.needs:
            visit(by_name[need], (*path, m.name))
        order.append(m)

    for m in registry:
        visit(m, ())
    return order


def summarize(inputs: RankInputs, has_gpu: bool,
              registry: tuple[Measurement, ...] | None = None) -> dict[str, Any]:
    """{name: per-rank value} of every entry with a per-rank step, in registry order (None
    for a rank the step does not run on)."""
    for m in MEASUREMENTS if registry is None else registry:
        if m.per_rank is not None:
            inputs.values[m.name] = m.per_rank(inputs) if m.runs_on(has_gpu) else None
    return inputs.values


def combine_all(summaries: list, ctx: Combining,
                registry: tuple[Measurement, ...] | None = None) -> dict[str, Result]:
    """{name: combined result} in registry order, each combine run after those it needs.
    ``summaries``: the RankSummary of each rank with a timeline, by rank."""
    registry = MEASUREMENTS if registry is None else registry
    for m in _combine_order(registry):
        values = {s.rank: s.values.get(m.name) for s in summaries if m.runs_on(s.has_gpu)}
        ctx.results[m.name] = m.combine(values, ctx)
    return {m.name: ctx.results[m.name] for m in registry if m.name in ctx.results}


def judge_all(results: dict[str, Result], th: Thresholds,
              registry: tuple[Measurement, ...] | None = None) -> list[Finding]:
    """The findings of every result, in registry order. A result that names no topic
    measured nothing to judge (no collectives) and has none; one whose topic is
    ``no_gpu`` needed GPU events the run lacks, and says so (one finding each)."""
    found: list[Finding] = []
    for m in MEASUREMENTS if registry is None else registry:
        topic = results[m.name].facts.get("topic") if m.name in results else None
        judge = no_gpu_findings if topic == NO_GPU else m.judge if topic else None
        if judge is not None:
            found += judge(results[m.name], th)
    return found


def judges(registry: tuple[Measurement, ...] | None = None) -> dict[str, Judge]:
    """{name: judge} of the entries whose results are judged."""
    return {m.name: m.judge for m in (MEASUREMENTS if registry is None else registry)
            if m.judge is not None}


check(MEASUREMENTS)
