"""The tables a report shows after its findings, so that what a finding points at ("check
MFU in the efficiency table") is on the page: top kernels and CPU ops, efficiency,
collectives, transfers and the code the GPU waits for. Each is a :class:`Section` of display
strings with units; text and Markdown lay them out. Readable at 2 ranks and at 1024: per-rank
tables turn into the spread over ranks past ``MAX_RANK_ROWS``; the others are aggregated over
ranks and cut to the largest rows.

:data:`SHOWN` says which measurement (by its name in
:data:`profkit.analyzers.measurements.MEASUREMENTS`) each section shows, in report order,
and which rows of it the JSON report carries."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.parts import part_label
from profkit.analyzers.report.inference_sections import inference_rows, inference_section
from profkit.analyzers.report.memory_sections import (
    memory_section,
    peak_live_section,
    recompute_section,
)
from profkit.analyzers.report.mfu_columns import with_hfu
from profkit.analyzers.report.section import (  # noqa: F401  (Section, Shown: re-exported)
    MAX_RANK_ROWS,
    TOP_ROWS,
    Section,
    Shown,
    safe_pick,
)
from profkit.analyzers.report.zero3_section import zero3_rows, zero3_section
from profkit.analyzers.thresholds import DEFAULT

from profkit.classify.names import short_kernel_names
from profkit.textout import plural

IDLE_ROWS = 8
NAME_CHARS = 60
ROOFLINE_ROWS = 200  # rows of the roofline table in the JSON report


def sections(a: Analysis) -> list[Section]:
    """Every section with something to show, in report order (:data:`SHOWN`)."""
    built = (shown.section(a) for shown in SHOWN if shown.section is not None)
    return [s for s in built if s is not None and not s.table.empty]


def recorded_steps(a: Analysis) -> int:
    """Rank-steps the kernel and op totals cover: each GPU rank's recorded steps (a rank
    without step ranges counts its one window); in a run without GPU events, every rank's."""
    eff = a.table("efficiency")
    if not eff.empty and "steps" in eff:
        return int(np.maximum(eff["steps"].fillna(0).to_numpy(), 1).sum())
    cpu = a.table("cpu_steps")  # a run without GPU events: each rank's recorded steps
    if not cpu.empty:
        return int(np.maximum(cpu["steps"].to_numpy(), 1).sum())
    return max(len(a.table("rank_breakdown")), 1)


def used_steps(a: Analysis, ranks) -> int:
    """Steps the verdict used, summed over ``ranks`` (at least one per rank)."""
    info = a.run.get("steps") or {}
    return sum(max(len((info.get(str(int(r))) or {}).get("used") or []), 1) for r in set(ranks))


def kernels_section(a: Analysis) -> Section | None:
    k = a.table("top_kernels")
    if k.empty:
        return None
    n_ranks = max(len(a.table("efficiency")), 1)
    steps = recorded_steps(a)
    top = k.head(TOP_ROWS)
    table = pd.DataFrame({
        "kernel": short_kernel_names(top["name"].astype(str).tolist()),
        "class": [part_label(str(c)) for c in top["cls"]],
        "calls/step": [U.number(round(c / steps, 1)) for c in top["count"]],
        "ms/step": [U.ms_of_ns(t / steps) for t in top["total_ns"]],
        "share": [U.pct(s) for s in top["share"]]})
    if n_ranks > 1:  # a straggler's kernels show in the spread
        per_rank = steps / n_ranks
        table["per rank"] = [U.ms_range(lo / per_rank, hi / per_rank)
                             for lo, hi in zip(top["rank_min_total_ns"], top["rank_max_total_ns"])]
    return Section(f"Top kernels (GPU time per step, {plural(n_ranks, 'rank')}, "
                   f"{plural(steps, 'rank-step')})",
                   table, [f"share: of all kernel time; full names in --format json and "
                           f"--tables ({plural(len(k), 'kernel')} kept)"], clip=("kernel",))


def roofline_section(a: Analysis) -> Section | None:
    """The kernels taking the most time, with their class of work and how close they come
    to the roof that bounds them (per rank that ran them, averaged)."""
    roof = a.table("roofline")
    if roof.empty:
        return None
    g = roof.assign(s=roof["kernel_ms_per_step"] * 1e-3).groupby("kernel", sort=False).agg(
        short=("short_name", "first"), op=("op", "first"), bound=("bound", "first"),
        ms=("kernel_ms_per_step", "mean"), s=("s", "sum"), flops=("flops_per_step", "sum"),
        nbytes=("bytes_per_step", "sum"), peak_tflops=("peak_tflops", "mean"),
        peak_gbps=("peak_gbps", "mean"))
    top = g.sort_values("ms", ascending=False, kind="stable").head(TOP_ROWS)
    tflops = top["flops"] / top["s"] / 1e12
    gbps = top["nbytes"] / top["s"] / 1e9
    roof_frac = np.where(top["bound"] == "math", tflops / top["peak_tflops"], gbps / top["peak_gbps"])
    table = pd.DataFrame({
        "kernel": [U.clip(n, NAME_CHARS) for n in top["short"]],
        "op": [U.clip(n, 18) for n in top["op"]], "bound": top["bound"],
        "ms/step": [U.ms(v) for v in top["ms"]], "TFLOP/s": [U.tflops(v) for v in tflops],
        "GB/s": [U.gbps(v) for v in gbps],
        "of its roof": [U.pct(f) if b in ("math", "memory") else U.MISSING
                        for f, b in zip(roof_frac, top["bound"])]})
    return Section("Kernel roofline (per step; FLOPs and bytes from the ops' shapes)", table, [
        "bound: memory or math by FLOPs per byte against the device's peaks; latency: too "
        "little work to reach either; unknown: no shapes or no peaks (docs/roofline.md)"],
        clip=("kernel",))


def ncu_section(a: Analysis) -> Section | None:
    """Nsight Compute's counters of the measured kernels (profkit ncu), beside the trace's
    duration and, where the analysis has a roofline, the estimated bytes and bound."""
    k = a.table("ncu_kernels")
    if k.empty:
        return None
    top = k.head(TOP_ROWS)

    def col(name, fmt):
        return [fmt(v) for v in top[name]] if name in top else [U.MISSING] * len(top)

    def pct(v):  # ncu's percentages are 0-100
        return U.pct(U.finite(v) / 100) if U.finite(v) is not None else U.MISSING

    table = pd.DataFrame({
        "kernel": top["short_name"], "launches": top["launches"],
        "us (trace/ncu)": [f"{_us(t)}/{_us(n)}" for t, n in zip(top["trace_us"], top["ncu_us"])],
        "DRAM": col("dram_pct", pct), "DRAM/call": col("dram_bytes", U.size),
        "est./call": col("est_bytes", U.size), "SM": col("sm_pct", pct),
        "tensor": col("tensor_pct", pct), "occupancy": col("occupancy_pct", pct),
        "L2 hit": col("l2_hit_pct", pct),
        "bound (ncu/est.)": [f"{m}/{e if isinstance(e, str) and e else U.MISSING}" for m, e in
                             zip(top["measured_bound"], col("est_bound", lambda v: v))],
        "top stall": [str(s).split(",")[0] or U.MISSING for s in top["top_stalls"]]})
    notes = ["DRAM, SM, tensor (pipe), occupancy (achieved): % of peak, medians over the "
             "launches measured; est.: the shape-based roofline; all counters in --format json "
             "and --tables (ncu_kernels); ncu's report: <run>/ncu/report.ncu-rep"]
    return Section(f"Nsight Compute counters ({int(k['launches'].sum())} launches of "
                   f"{len(k)} kernel(s), profkit ncu)", table, notes)


def _us(value) -> str:
    v = U.finite(value)
    return U.MISSING if v is None else f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def ops_section(a: Analysis) -> Section | None:
    ops = a.table("top_ops")
    if ops.empty:
        return None
    steps = recorded_steps(a)
    top = ops.head(TOP_ROWS)
    table = pd.DataFrame({
        "op": [U.clip(n, NAME_CHARS) for n in top["name"]],
        "calls/step": [U.number(round(c / steps, 1)) for c in top["count"]],
        "self ms/step": [U.ms_of_ns(t / steps) for t in top["self_ns"]],
        "total ms/step": [U.ms_of_ns(t / steps) for t in top["total_ns"]],
        "self share": [U.pct(s) for s in top["self_share"]]})
    return Section("Top CPU ops (self time per step)", table, clip=("op",))


def efficiency_section(a: Analysis) -> Section | None:
    eff = a.table("efficiency")
    if eff.empty:
        return None
    cols = {"TFLOP/s": eff["achieved_tflops"], "MFU": eff["mfu"],
            "FLOP coverage": eff["flop_coverage"], "GPU busy": eff["gpu_util"]}
    fmts = {"TFLOP/s": U.tflops, "MFU": U.pct, "FLOP coverage": U.pct, "GPU busy": U.pct}
    notes = [f"MFU is judged where ops with known FLOPs launched at least "
             f"{DEFAULT.min_flop_coverage_frac:.0%} of the compute time (FLOP coverage), or "
             "with --flops-per-step; '-': not judged"]
    cols, fmts, notes = with_hfu(eff, cols, fmts, notes)
    if len(eff) <= MAX_RANK_ROWS:
        table = pd.DataFrame({"rank": eff["rank"], "device": [
            device_label(m, n) for m, n in zip(eff["device_model"], eff["device_name"])]})
        for name, values in cols.items():
            table[name] = [fmts[name](v) for v in values]
        table["precision"] = eff["precision_mix"].fillna("")
        return Section("Efficiency (per rank)", table, notes)
    rows = []
    for label, pick in (("min", np.nanmin), ("median", np.nanmedian), ("max", np.nanmax)):
        rows.append({"over ranks": label, **{name: fmts[name](safe_pick(pick, v))
                                              for name, v in cols.items()}})
    mix = eff["precision_mix"].fillna("").mode()
    notes.append(f"precision (most ranks): {mix.iloc[0] if len(mix) else '-'}")
    return Section(f"Efficiency (spread over {len(eff)} ranks)", pd.DataFrame(rows), notes)


def collectives_section(a: Analysis) -> Section | None:
    """Matched collectives by kind, size and group size: count, median latency and bus
    bandwidth, and that bandwidth against the link's peak (collective_links)."""
    coll = a.table("collectives")
    if coll.empty:
        return None
    links = a.table("collective_links")
    peak = links.set_index("key")["link_gbps"] if not links.empty else pd.Series(dtype=float)
    coll = coll.assign(link_gbps=coll["key"].map(peak))
    groups = coll.groupby(["collective", "bytes", "group_size"], dropna=False).agg(
        count=("key", "size"), latency_ns=("latency_ns", "median"),
        busbw_gbps=("busbw_gbps", "median"), link_gbps=("link_gbps", "median")).reset_index()
    groups["time_ns"] = groups["count"] * groups["latency_ns"]
    top = groups.sort_values("time_ns", ascending=False, kind="stable").head(TOP_ROWS)
    table = pd.DataFrame({
        "collective": top["collective"], "size": [U.size(b) for b in top["bytes"]],
        "ranks": [U.count(g) for g in top["group_size"]], "count": top["count"],
        "latency (median)": [U.ms_of_ns(v) for v in top["latency_ns"]],
        "bus bandwidth": [U.gbps(v) for v in top["busbw_gbps"]],
        "link peak": [U.gbps(v) for v in top["link_gbps"]],
        "of link": [U.pct(b / p) if U.finite(p) else U.MISSING
                    for b, p in zip(top["busbw_gbps"], top["link_gbps"])]})
    notes = [f"{plural(len(coll), 'collective')} matched across ranks, in "
             f"{plural(len(groups), 'row')} of one kind, size and group size"]
    if top["link_gbps"].isna().all():
        notes.append(f"link peak unknown: {_why_no_link_peak(a)}")
    return Section("Collectives (matched across ranks, by kind and size)", table, notes)


def _why_no_link_peak(a: Analysis) -> str:
    """Why the collectives have no link to be judged against (the cases of
    measure.links.link_peak): ranks on several hosts, no GPU, or a GPU not in the table."""
    hosts = a.table("clock_offsets")
    names = set(hosts["host"].dropna().astype(str)) - {""} if "host" in hosts else set()
    if len(names) > 1:
        return (f"the ranks run on {plural(len(names), 'host')} (across hosts the network "
                "is the limit, and its speed is not in the trace)")
    eff = a.table("efficiency")
    if eff.empty:
        return "no GPU events in this run (collectives on the CPU, e.g. gloo)"
    shown = _values(eff, "device_model") or _values(eff, "device_name")
    if shown:
        return f"{', '.join(shown)}: not in profkit's table of GPU links"
    return "the GPU model is not in the trace"


def _values(table: pd.DataFrame, column: str) -> list[str]:
    return sorted(set(table[column].dropna().astype(str)) - {""}) if column in table else []


def transfers_section(a: Analysis) -> Section | None:
    """Copies by direction and memory kind over every rank: bytes per step, achieved GB/s
    (bytes over copy time) against the link's peak."""
    tr = a.table("transfers")
    if tr.empty:
        return None
    groups = tr.groupby(["direction", "memory"], dropna=False)
    rows = []
    for (direction, memory), g in groups:
        steps = used_steps(a, g["rank"])
        achieved = g["bytes"].sum() / g["gpu_ns"].sum() if g["gpu_ns"].sum() else np.nan
        peak = g["peak_gbps"].median()
        if g["achieved_gbps"].isna().all() or (U.finite(peak) and achieved > peak):
            achieved = np.nan  # faster than the link: a note says why (findings/trust.py)
        rows.append({"direction": direction, "memory": memory,
                     "copies/step": U.number(round(g["copies"].sum() / steps, 1)),
                     "size/step": U.size(g["bytes"].sum() / steps), "GB/s": U.gbps(achieved),
                     "link peak": U.gbps(peak),
                     "of peak": U.pct(achieved / peak) if U.finite(peak) else U.MISSING,
                     "link": str(g["link"].iloc[0] or "unknown"),
                     "ranks": U.clip(rank_ranges(g["rank"]), 30)})
    return Section("Transfers (memory copies in the steps)", pd.DataFrame(rows),
                   fold=("link",), clip=("ranks",))


def pipeline_section(a: Analysis) -> Section | None:
    """A pipeline's stages in order: rank, own time per microbatch, bubble against the
    pipeline's step and the schedule's theory (analyzers/measure/pipeline.py)."""
    t = a.table("pipeline_stages")
    if t.empty:
        return None
    rows = [{"stage": int(r.stage), "rank": int(r.rank), "microbatches": int(r.microbatches),
             "own ms/microbatch": U.ms(r.own_ms_per_microbatch),
             "bubble": U.pct(r.bubble_frac), "theory": U.pct(r.theory_frac),
             "unbalanced": "yes" if r.unbalanced else ""} for r in t.itertuples(index=False)]
    notes = ["bubble: 1 - the stage's own time (every part but the bubble and held work) / "
             "the pipeline's step (the first stage's GPU span of a step); theory "
             "(p-1)/(m+p-1) for balanced stages"]
    return Section("Pipeline stages", pd.DataFrame(rows), notes)


def idle_section(a: Analysis) -> Section | None:
    """Where the GPU waits for the host: GPU-idle time per step by host part and code."""
    code = a.table("idle_code")
    if code.empty:
        return None
    rows = []
    for (part, label), g in code.groupby(["part", "code"], sort=False):
        rows.append({"part": part_label(part), "code": U.clip(label, 70),
                     "ns_per_step": g["idle_ns"].sum() / used_steps(a, g["rank"]),
                     "ranks": U.clip(rank_ranges(g["rank"]), 30)})
    table = pd.DataFrame(rows).sort_values("ns_per_step", ascending=False, kind="stable")
    top = table.head(IDLE_ROWS)
    top = top.assign(ns_per_step=[U.ms_of_ns(v, "step") for v in top["ns_per_step"]])
    top = top.rename(columns={"ns_per_step": "GPU idle"})[["part", "code", "GPU idle", "ranks"]]
    return Section("Where the GPU waits for the host (idle time by the code running)", top,
                   ["per step of the ranks listed; capture with_stack=True to see Python lines"],
                   fold=("code",), clip=("ranks",))


def comm_dimensions_section(a: Analysis) -> Section | None:
    """Exposed communication by parallel dimension (measure/layout.py): which groups, how
    often, how much of the step, and the rule that named the dimension."""
    dims = a.table("comm_dimensions")
    if dims.empty:
        return None
    table = pd.DataFrame({
        "dimension": dims["dimension"].astype(str), "collective": dims["collective"].astype(str),
        "groups": [U.clip(g, 40) for g in dims["groups"]],
        "calls/step": [U.number(round(c, 1)) for c in dims["calls_per_step"]],
        "exposed": [U.ms(v, "step") for v in dims["exposed_ms_per_step"]],
        "of step": [U.pct(f) for f in dims["step_frac"]],
        "decided by": [str(r) or "-" for r in dims["rule"]]})
    layout = a.table("parallel_layout")
    title = "Communication by parallel dimension (exposed: no compute beside it; mean per rank)"
    notes = [f"layout: {layout['layout'].iat[0]}"] if len(layout) else []
    return Section(title, table, notes, fold=("decided by", "groups"))


def layout_line(a: Analysis) -> str:
    """'4 ranks: dp 2 x tp 2' from the process groups, '' when no dimension is known."""
    layout = a.table("parallel_layout")
    return str(layout["layout"].iat[0]) if len(layout) else ""


def device_label(model, name) -> str:
    """The device as the peak table knows it; an unknown one says so, with its own name."""
    if isinstance(model, str) and model:
        return model
    return f"unknown ({name})" if isinstance(name, str) and name else "unknown"


# --- rows of the JSON report ----------------------------------------------------------

def kernel_rows(a: Analysis) -> list[dict[str, Any]]:
    """The top kernels with their full name and the short one the text report shows."""
    k = a.table("top_kernels")
    if k.empty:
        return []
    rows = k.to_dict("records")
    for row, short in zip(rows, short_kernel_names([str(r["name"]) for r in rows])):
        row["short_name"] = short
    return rows


def roofline_rows(a: Analysis) -> list[dict[str, Any]]:
    """The kernels that take the most time per step (at most :data:`ROOFLINE_ROWS`)."""
    roof = a.table("roofline")
    return roof.nlargest(ROOFLINE_ROWS, "kernel_ms_per_step").to_dict("records") if len(roof) \
        else []


# Report order: the sections follow it, and the JSON report's keys after its findings.
SHOWN: tuple[Shown, ...] = (
    # prefill and decode; no key at all in a run that is not inference
    Shown("inference", inference_section, "inference", inference_rows, json_when_empty=False),
    Shown("kernels", kernels_section, "top_kernels", kernel_rows),
    Shown("roofline", roofline_section, "roofline", roofline_rows),
    # measured by profkit ncu: Nsight Compute's counters per kernel, only when there are any
    Shown("ncu", ncu_section, "ncu_kernels", lambda a: a.table("ncu_kernels").to_dict("records"),
          json_when_empty=False),
    Shown("efficiency", efficiency_section, "efficiency",
          lambda a: a.table("efficiency").to_dict("records"), json_when_empty=False),
    Shown("recompute", recompute_section, "recompute",
          lambda a: a.table("recompute").to_dict("records"), json_when_empty=False),
    Shown("collectives", collectives_section),
    # the process groups' dimensions: exposed communication per dimension, and the layout
    Shown("layout", comm_dimensions_section, "comm_dimensions",
          lambda a: a.table("comm_dimensions").to_dict("records"), json_when_empty=False),
    Shown("layout", None, "parallel_layout",
          lambda a: a.table("parallel_layout").to_dict("records"), json_when_empty=False),
    # DeepSpeed ZeRO-3's collectives per step; no key at all in a run without ZeRO-3
    Shown("zero3", zero3_section, "zero3", zero3_rows, json_when_empty=False),
    Shown("transfers", transfers_section),
    # a pipeline's stages; no key at all in a run that is not one
    Shown("pipeline", pipeline_section, "pipeline",
          lambda a: a.table("pipeline_stages").to_dict("records"), json_when_empty=False),
    # the allocator's peaks per rank; no key at all in a run without [memory] events
    Shown("allocations", memory_section, "memory",
          lambda a: a.table("memory_ranks").to_dict("records"), json_when_empty=False),
    # what holds each rank's peak; no key at all in a run without [memory] events
    Shown("peak_live", peak_live_section, "memory_live",
          lambda a: a.table("memory_live").to_dict("records"), json_when_empty=False),
    Shown("breakdown", idle_section),  # the idle time by code is the breakdown's
    Shown("cpu_ops", ops_section),
)
