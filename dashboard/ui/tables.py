"""The analysis tables as people read them: each column named with its unit and its values
scaled to it (``median queue delay (us)`` rather than ``delay_median_ns``), kernel names
shortened (:func:`~profkit.classify.names.short_kernel_names`) with the full name kept for
hover, parts by their display names. Numbers stay numbers, so a table sorts and filters
by value (:mod:`~profkit.dashboard.ui.grids`: equal to, greater than, ... from a column's
filter menu).

:data:`TABLES` lists every table a finding may point at, in the order the Tables page shows
them; :func:`cited_table` says which one a finding points at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from profkit.analyzers.analyze import part_name
from profkit.analyzers.measure.fusion import SEQUENCE_SEP
from profkit.analyzers.parts import PART_TABLE, part_label

from profkit.classify.names import short_kernel_name, short_kernel_names

# value transforms: source unit -> display unit
MS = 1e-6  # ns -> ms
US = 1e-3  # ns -> us
PCT = 100.0  # fraction -> %
MB = 1e-6  # bytes -> MB
GB = 1e-9  # bytes -> GB
NAME = "name"  # a kernel name: shortened, the full name on hover
PART = "part"  # a breakdown part or GPU class: its display name
SEQUENCE = "sequence"  # kernels joined by SEQUENCE_SEP: each shortened

Column = tuple[str, str, object]  # (source column, display name, transform)


@dataclass(frozen=True)
class TableSpec:
    name: str  # the analysis table
    title: str
    columns: tuple[Column, ...]
    note: str = ""


def _spec(name: str, title: str, *columns: Column, note: str = "") -> TableSpec:
    return TableSpec(name, title, columns, note)


KERNELS = _spec(
    "top_kernels", "Top kernels (all ranks)",
    ("name", "kernel", NAME), ("cls", "class", PART), ("subcls", "subclass", None),
    ("count", "calls", None), ("total_ns", "GPU time (ms)", MS), ("mean_ns", "mean (us)", US),
    ("share", "share of kernel time (%)", PCT), ("rank_min_total_ns", "least on a rank (ms)", MS),
    ("rank_max_total_ns", "most on a rank (ms)", MS))
OPS = _spec(
    "top_ops", "Top CPU ops (self time, all ranks)",
    ("name", "op", None), ("count", "calls", None), ("self_ns", "self (ms)", MS),
    ("total_ns", "total (ms)", MS), ("mean_self_ns", "mean self (us)", US),
    ("self_share", "share of self time (%)", PCT))


def rank_breakdown_spec() -> TableSpec:
    """The per-rank step breakdown: each part's share of the rank's median used step, the
    parts in :data:`~profkit.analyzers.parts.PART_TABLE`'s order and words."""
    parts = tuple((p.key, f"{part_label(p.key)} (%)", PCT) for p in PART_TABLE)
    return _spec(
        "rank_breakdown", "Step breakdown per rank: where each rank's step goes",
        ("rank", "rank", None), ("steps", "steps used", None),
        ("steps_recorded", "steps recorded", None), ("step_time_ms", "step (ms)", None),
        *parts, ("primary", "largest part", PART),
        ("comm_overlap_frac", "communication hidden under compute (%)", PCT),
        note="each part's share of the rank's step, over the steps the verdict uses; the "
             "parts add up to 100%.")


TABLES: tuple[TableSpec, ...] = (
    rank_breakdown_spec(),
    _spec("efficiency", "Efficiency: MFU, TFLOP/s, precision (per rank)",
          ("rank", "rank", None), ("device_name", "device", None),
          ("achieved_tflops", "achieved (TFLOP/s)", None), ("peak_tflops", "peak (TFLOP/s)", None),
          ("mfu", "MFU (%)", PCT), ("flop_coverage", "FLOP coverage (%)", PCT),
          ("flops_source", "FLOPs from", None), ("precision_mix", "precision", None),
          ("gpu_util", "GPU busy (%)", PCT), ("sm_efficiency", "SM efficiency (%)", PCT),
          ("occupancy_pct", "occupancy (%)", None),
          ("tensor_core_gemm_frac", "tensor-core GEMM time (%)", PCT),
          ("gemm_time_ns", "GEMM time (ms)", MS), ("fp32_gemm_ns", "fp32 GEMM time (ms)", MS),
          note="MFU is judged only where ops with known FLOPs launched enough of the compute "
               "time (FLOP coverage); blank: not judged."),
    _spec("stream_breakdown", "GPU time per stream (profiled steps)",
          ("rank", "rank", None), ("stream", "stream", None),
          ("compute_ns", "compute (ms)", MS), ("communication_ns", "communication (ms)", MS),
          ("memcpy_ns", "transfer (ms)", MS), ("memset_ns", "memset (ms)", MS),
          ("busy_ns", "all kernels (ms)", MS), ("ops", "GPU ops", None)),
    _spec("compute_subclasses", "Compute kernels by kind (profiled steps)",
          ("rank", "rank", None), ("subcls", "kind", None), ("kernel_ns", "kernel time (ms)", MS),
          ("kernels", "kernels", None), ("share", "share of compute (%)", PCT)),
    _spec("collectives", "Collectives: latency and bus bandwidth against the link's peak",
          ("key", "collective id", None), ("collective", "collective", None),
          ("pg", "process group", None), ("step", "step", None), ("n_ranks", "ranks", None),
          ("bytes", "size (MB)", MB), ("latency_ns", "latency (us)", US),
          ("busbw_gbps", "bus bandwidth (GB/s)", None), ("link_gbps", "link peak (GB/s)", None),
          ("link_util", "of link peak (%)", PCT), ("start_skew_ns", "start skew (us)", US),
          ("last_rank", "last to arrive", None),
          note="latency: the shortest time over the ranks (the transfer itself); bus "
               "bandwidth as nccl-tests computes it."),
    _spec("group_latency", "Process groups slower than their peers",
          ("pg", "process group", None), ("collective", "collective", None),
          ("bytes", "size (MB)", MB), ("group_size", "ranks", None),
          ("collectives", "collectives", None), ("median_latency_ns", "median latency (us)", US),
          ("peer_median_latency_ns", "peers' median latency (us)", US),
          ("slowdown", "slowdown (x)", None), ("median_busbw_gbps", "bus bandwidth (GB/s)", None),
          ("ranks", "ranks of the group", None), ("slow", "slow", None)),
    _spec("stragglers", "Stragglers: who arrives last at the collectives",
          ("rank", "rank", None), ("straggler", "straggler", None),
          ("n_last", "arrived last", None), ("n_collectives", "collectives", None),
          ("late_share", "arrived last (%)", PCT), ("p_value", "p value", None),
          ("others_exposed_wait_ns_per_step", "others wait (ms/step)", MS),
          ("wait_frac", "others wait (% of their step)", PCT),
          ("compute_ns_per_step", "its compute (ms/step)", MS),
          ("others_compute_ns_per_step", "others' compute (ms/step)", MS)),
    _spec("launches", "Kernel launches and the launch queue",
          ("rank", "rank", None), ("launch_calls", "launch calls", None),
          ("launch_time_frac", "launch calls (% of step)", PCT),
          ("launch_median_ns", "launch call, median (us)", US),
          ("launch_p95_ns", "launch call, p95 (us)", US),
          ("delay_median_ns", "queue delay, median (us)", US),
          ("delay_p95_ns", "queue delay, p95 (us)", US),
          ("delayed_launches", "delayed launches", None),
          ("slow_runtime_calls", "slow runtime calls", None),
          ("slow_runtime_ns", "slow runtime calls (ms)", MS),
          ("max_queue_depth", "max queue depth", None), ("graph_launches", "graph launches", None),
          note="queue delay: from the end of the launch call to the kernel's start."),
    _spec("queue_depth", "Launch queue depth per stream",
          ("rank", "rank", None), ("stream", "stream", None), ("gpu_ops", "GPU ops", None),
          ("max_depth", "max depth", None), ("mean_depth", "mean depth", None)),
    _spec("short_kernels", "Short kernels",
          ("rank", "rank", None), ("kernels", "kernels", None),
          ("short_kernels", "short kernels", None), ("short_frac", "short (% of kernels)", PCT),
          ("short_total_ns", "short kernels' time (ms)", MS),
          ("short_time_frac", "short (% of kernel time)", PCT),
          ("kernel_busy_frac", "GPU busy (%)", PCT)),
    _spec("fusion_candidates", "Fusion candidates: kernel sequences that repeat",
          ("sequence", "kernels in order", SEQUENCE), ("n", "kernels", None),
          ("count", "times seen", None), ("per_step", "per step", None),
          ("total_ns", "GPU time (ms)", MS), ("ranks", "ranks", None)),
    _spec("nvml", "NVML: clocks, power, memory (per GPU)",
          ("rank", "rank", None), ("device", "device", None),
          ("sm_clock_mean_mhz", "SM clock, mean (MHz)", None),
          ("sm_clock_min_mhz", "SM clock, min (MHz)", None),
          ("throttle_samples", "throttled samples", None), ("clock_samples", "samples", None),
          ("throttle_reasons", "throttle reasons", None), ("power_mean_w", "power, mean (W)", None),
          ("power_source", "power from", None), ("energy_j_per_step", "energy (J/step)", None), ("energy_source", "energy from", None),
          ("gpm_tensor_active_pct", "tensor active (%)", None),
          ("gpm_dram_bw_pct", "DRAM bandwidth (%)", None),
          ("peak_mem_bytes", "peak memory (GB)", GB), ("mem_capacity_bytes", "memory (GB)", GB),
          ("peak_mem_frac", "peak memory (% of the GPU's)", PCT)),
    _spec("transfers", "Transfers: memory copies by direction",
          ("rank", "rank", None), ("direction", "direction", None), ("memory", "memory", None),
          ("copies", "copies", None), ("bytes", "size (MB)", MB), ("gpu_ns", "copy time (ms)", MS),
          ("achieved_gbps", "achieved (GB/s)", None), ("peak_gbps", "link peak (GB/s)", None),
          ("peak_frac", "of peak (%)", PCT), ("link", "link", None)),
    _spec("pipeline_stages", "Pipeline stages: the bubble against the schedule's theory",
          ("stage", "stage", None), ("rank", "rank", None), ("microbatches", "microbatches", None),
          ("own_ms_per_microbatch", "own time per microbatch (ms)", None),
          ("bubble_frac", "bubble (% of the step)", PCT),
          ("theory_frac", "theory (p-1)/(m+p-1) (%)", PCT), ("unbalanced", "unbalanced", None),
          note="bubble: 1 - the stage's own time / the pipeline's step (the first stage's GPU "
               "span of a step)."),
    _spec("roofline", "Kernel roofline: math-, memory- or latency-bound",
          ("rank", "rank", None), ("kernel", "kernel", NAME), ("op", "op", None),
          ("bound", "bound", None), ("calls_per_step", "calls/step", None),
          ("kernel_ms_per_step", "time (ms/step)", None),
          ("achieved_tflops", "achieved (TFLOP/s)", None),
          ("achieved_gbps", "achieved (GB/s)", None), ("peak_tflops", "peak (TFLOP/s)", None),
          ("peak_gbps", "peak (GB/s)", None),
          ("intensity_flop_per_byte", "FLOP per byte", None),
          ("bytes_per_step", "moved (GB/step)", GB),
          note="FLOPs and bytes from the ops' recorded shapes (docs/roofline.md)."),
    _spec("memory_ranks", "Memory: the allocator's peaks (per rank and GPU)",
          ("rank", "rank", None), ("device", "device", None), ("steps", "steps", None),
          ("peak_allocated_bytes", "peak allocated (GB)", GB),
          ("peak_reserved_bytes", "peak reserved (GB)", GB),
          ("capacity_bytes", "capacity (GB)", GB),
          ("peak_frac", "reserved (% of capacity)", PCT),
          ("resident_bytes", "resident (GB)", GB), ("transient_bytes", "transient (GB)", GB),
          ("batch_headroom_x", "batch could grow (x)", None),
          note="PyTorch's caching allocator over the steps the verdict uses; resident: "
               "allocated when a step starts, transient: what comes and goes in it."),
    _spec("inference_phases", "Inference phases: prefill and decode",
          ("rank", "rank", None), ("phase", "phase", None),
          ("forwards_per_step", "forwards/step", None), ("batch", "batch", None),
          ("time_ms", "time (ms/step)", None), ("share", "of step (%)", PCT),
          ("ttft_ms", "time to first token (ms)", None), ("tpot_ms", "per token (ms)", None),
          ("tpot_p10_ms", "per token p10 (ms)", None), ("tpot_p90_ms", "per token p90 (ms)", None),
          ("tokens_per_s", "tokens/s", None), ("gpu_busy", "GPU busy (%)", PCT),
          ("mfu", "MFU (%)", PCT), ("hbm_util", "HBM use (%)", PCT),
          ("bytes_per_token", "bytes per forward (GB)", GB), ("bytes_source", "bytes from", None),
          ("source", "phases from", None),
          note="prefill: the step's start to its first token; per token: one token's GPU work "
               "ending to the next's (analyzers/measure/inference.py)."),
    _spec("idle_code", "Where the GPU waits for the host (GPU idle by the code running)",
          ("rank", "rank", None), ("part", "cause", PART), ("code", "code", None),
          ("idle_ns", "GPU idle (ms)", MS),
          note="in the profiled steps; capture with with_stack=True to see Python lines."),
    _spec("shape_setup", "Setup for new input shapes: ops slow the first time they see a shape",
          ("rank", "rank", None), ("name", "op", None), ("calls", "setup calls", None),
          ("steps", "steps", None), ("idle_ns", "GPU idle inside (ms)", MS),
          ("setup_ns", "beyond the repeats (ms)", MS), ("first_ns", "first call (ms)", MS),
          ("repeat_ns", "repeat (us)", US), ("dims", "a new shape", None),
          note="in the used steps; an op's first call with a shape against its later calls "
               "with it (analyzers/measure/shapesetup.py)."),
)
BY_NAME = {t.name: t for t in TABLES}

# finding category -> the table its evidence comes from: a part's from the parts table, the
# others' here
CITED = {**{p.key: p.cited for p in PART_TABLE if p.cited},
         "mfu": "efficiency", "precision": "efficiency", "collectives": "collectives",
         "straggler": "stragglers", "launch": "launches", "runtime_calls": "launches",
         "fusion": "fusion_candidates", "throttling": "nvml", "memory": "nvml",
         "idle_code": "idle_code", "memory_bound": "roofline", "allocations": "memory_ranks",
         "decode_batch": "inference_phases", "prefill_roof": "inference_phases"}


def cited_table(category: str) -> TableSpec | None:
    return BY_NAME.get(CITED.get(category, ""))


def anchor(name: str) -> str:
    """The element id of a table's card on the Tables page (a URL fragment)."""
    return f"table-{name}"


def _sequence(text) -> str:
    return " > ".join(short_kernel_name(n) for n in str(text).split(SEQUENCE_SEP))


def _column(values: pd.Series, how) -> tuple[pd.Series, list[str] | None]:
    """(display values, full text for hover or None) of one column."""
    if how == NAME:
        full = values.astype(str).tolist()
        return pd.Series(short_kernel_names(full), index=values.index), full
    if how == SEQUENCE:
        full = values.astype(str).tolist()
        return pd.Series([_sequence(v) for v in full], index=values.index), full
    if how == PART:
        return values.map(lambda v: part_name(str(v)) if isinstance(v, str) else v), None
    if isinstance(how, float):
        return pd.to_numeric(values, errors="coerce") * how, None
    if isinstance(how, Callable):
        return values.map(how), None
    return values, None


def readable(spec: TableSpec, frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """``frame`` (the analysis table of ``spec``) in display names and units, and the full
    text of shortened columns ({display column: full values}) for hover. Columns the
    table lacks are left out."""
    out, full = {}, {}
    for source, shown, how in spec.columns:
        if source not in frame:
            continue
        out[shown], long = _column(frame[source], how)
        if long is not None:
            full[shown] = long
    table = pd.DataFrame(out, index=frame.index).reset_index(drop=True)
    return table.replace([np.inf, -np.inf], np.nan), full


def with_links(analysis) -> pd.DataFrame:
    """The collectives table with each collective's link peak and use of it."""
    coll, links = analysis.table("collectives"), analysis.table("collective_links")
    if coll.empty or links.empty:
        return coll
    extra = links.drop_duplicates("key").set_index("key")[["link_gbps", "link_util"]]
    return coll.join(extra, on="key")


def without_idle_parts(ranks: pd.DataFrame) -> pd.DataFrame:
    """The rank breakdown without the optional parts no rank has time in (the pipeline
    bubble of a run that is not a pipeline), as the text report's rank table leaves them."""
    idle = [p.key for p in PART_TABLE if p.optional and p.key in ranks
            and not (pd.to_numeric(ranks[p.key], errors="coerce").fillna(0) > 0).any()]
    return ranks.drop(columns=idle)


def source(analysis, spec: TableSpec) -> pd.DataFrame:
    """The analysis table ``spec`` shows (collectives with their links, the rank breakdown
    without idle optional parts)."""
    if spec.name == "collectives":
        return with_links(analysis)
    if spec.name == "rank_breakdown":
        return without_idle_parts(analysis.table(spec.name))
    return analysis.table(spec.name)
