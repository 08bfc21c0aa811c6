"""Map: one rank's trace reduced, on its own, to a compact :class:`RankSummary`.

Everything the cross-rank reduce (:func:`profkit.analyzers.analyze.combine`) needs of a rank
is in its summary: the per-rank tables (step breakdown, streams, kernels per step, launches,
queue depth, efficiency, NVML), partial totals that add up across ranks (kernels and CPU ops
by name, short-kernel n-grams), its collectives with start, duration, sequence numbers and
the other GPU work each one overlapped, and its step statistics. A summary is a few hundred
KB where the rank's events are hundreds of MB, so summaries of thousands of ranks fit in one
process, and the map can run anywhere: a local process pool, a Dask cluster, or each rank
of the job itself at the end of profiling.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import pandas as pd
from profkit.analyzers.measure import (
    breakdown,
    comms,
    efficiency,
    kernels,
    roofline,
    stragglers,
    transfers,
)
from profkit.analyzers.measure.steps import apply_step_marker, marker_candidates
from profkit.analyzers.options import DEFAULT_OPTIONS, AnalysisOptions
from profkit.analyzers.result import Finding
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import datacodec
from profkit.model import RankData

# Header facts the reduce reads (devices for peaks and link speeds, host for clocks/links;
# run id, host, pid, time span, steps and trace id to tell a rank's files from a stranger's,
# see profkit.run.rankfiles; sources: the files a rank was read from; problems: bad values
# repaired or dropped while reading, one line per file).
META_KEYS = ("source", "sources", "host", "devices", "base_time_ns", "trace_id",
             "profkit_run_id", "raw_event_count", "pid", "span_ns", "step_range", "problems")
DISTRIBUTED_KEYS = ("rank", "world_size", "backend", "nccl_version")


@datacodec.register
@dataclass
class RankSummary:
    """What the reduce needs of one rank (see module doc); picklable, no events."""

    rank: int
    meta: dict[str, Any]  # trimmed header facts; ``source`` is the trace file
    rank_source: str
    has_gpu: bool
    breakdown: dict[str, Any]  # breakdown.rank_parts plus steps_info
    collectives: tuple[pd.DataFrame, pd.DataFrame]
    step_stats: dict[str, float]
    kernels: dict[str, Any] | None = None  # GPU ranks only
    efficiency: tuple[dict, dict | None] | None = None  # GPU ranks only
    transfers: pd.DataFrame | None = None  # GPU ranks only: copies by direction and memory
    cpu_ops: pd.DataFrame | None = None  # ranks without GPU events: their CPU op totals
    roofline: dict[str, Any] | None = None  # GPU ranks only: roofline rows and facts

    def relabel(self, rank: int) -> RankSummary:
        """The same summary under another rank number (a trace whose rank was only known
        from its place among the run's files)."""
        for f in fields(self):
            _relabel(getattr(self, f.name), rank)
        self.rank = rank
        return self


def _relabel(value: Any, rank: int) -> None:
    if isinstance(value, pd.DataFrame) and "rank" in value.columns:
        value["rank"] = rank
    elif isinstance(value, dict):
        if isinstance(value.get("rank"), int):
            value["rank"] = rank
        for v in value.values():
            _relabel(v, rank)
    elif isinstance(value, list):  # findings are frozen: replace them
        value[:] = [replace(v, rank=rank) if isinstance(v, Finding) and v.rank is not None
                    else v for v in value]
        for v in value:
            _relabel(v, rank)
    elif isinstance(value, tuple):
        for v in value:
            _relabel(v, rank)


def step_source(data: RankData, opts: AnalysisOptions) -> dict[str, Any]:
    """Where the rank's steps come from, applying ``--step-marker`` first (which rewrites the
    rank's steps): {source, count, candidates (annotations that could mark steps)}."""
    if opts.step_marker:
        found = apply_step_marker(data, opts.step_marker)
        return {"source": f"marker {opts.step_marker}", "count": found, "candidates": []}
    if len(data.steps):
        return {"source": "ProfilerStep#", "count": int(len(data.steps)), "candidates": []}
    return {"source": "none", "count": 0,
            "candidates": [list(c) for c in marker_candidates(data.events)]}


def trim_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The header facts of a trace that travel with its summary (META_KEYS)."""
    dist = meta.get("distributed") or {}
    out = {k: meta.get(k) for k in META_KEYS}
    out["distributed"] = {k: dist[k] for k in DISTRIBUTED_KEYS if k in dist}
    return out


def summarize_rank(data: RankData, run_meta: dict[str, Any],
                   thresholds: Thresholds = DEFAULT,
                   opts: AnalysisOptions = DEFAULT_OPTIONS) -> RankSummary:
    """Reduce one rank to its summary. ``run_meta``: run.json's facts (its ``gpus`` list is
    read for device names when the trace header lacks them)."""
    steps_info = step_source(data, opts)  # may set the events' steps: before the sharing
    with data.sharing_selections():
        gpu = data.has_gpu
        parts = breakdown.rank_parts(data, opts, thresholds)
        parts["steps_info"] = steps_info
        return RankSummary(
            rank=data.rank, meta=trim_meta(data.meta), rank_source=data.rank_source, has_gpu=gpu,
            breakdown=parts,
            collectives=comms.rank_collectives(data),
            step_stats=stragglers.rank_step_stats(data),
            kernels=kernels.rank_kernel_parts(data.rank, data, thresholds, used_steps(parts))
            if gpu else None,
            efficiency=efficiency.rank_efficiency(data.rank, data, run_meta) if gpu else None,
            transfers=transfers.rank_transfers(data, bool(len(data.steps))) if gpu else None,
            cpu_ops=None if gpu else kernels.op_totals(data),
            roofline=roofline.rank_roofline(data.rank, data, run_meta, used_steps(parts), thresholds)
            if gpu else None,
        )


def used_steps(parts: dict[str, Any]) -> dict[int, int] | None:
    """{step: ns} of the steps the verdict reads (None when the rank has no step table)."""
    steps = parts.get("step_breakdown")
    if steps is None or steps.empty:
        return None
    used = steps[steps["used"].astype(bool) & (steps["step"] >= 0)]
    return {int(s): int(ns) for s, ns in zip(used["step"], used["step_ns"])}
