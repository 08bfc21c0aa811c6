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
from profkit.analyzers import breakdown, comms, efficiency, kernels, stragglers
from profkit.analyzers.findings import Finding
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import datacodec
from profkit.model import RankData

# Header facts the reduce reads (devices for peaks and link speeds, host for clocks/links).
META_KEYS = ("source", "host", "devices", "base_time_ns", "trace_id", "profkit_run_id",
             "raw_event_count", "problems")
DISTRIBUTED_KEYS = ("rank", "world_size", "backend", "nccl_version")


@datacodec.register
@dataclass
class RankSummary:
    """What the reduce needs of one rank (see module doc); picklable, no events."""

    rank: int
    meta: dict[str, Any]  # trimmed header facts; ``source`` is the trace file
    rank_source: str
    has_gpu: bool
    breakdown: dict[str, pd.DataFrame | None]
    collectives: tuple[pd.DataFrame, pd.DataFrame]
    step_stats: dict[str, float]
    kernels: dict[str, Any] | None = None  # GPU ranks only
    efficiency: tuple[dict, dict | None] | None = None  # GPU ranks only

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


def summarize_rank(data: RankData, run_meta: dict[str, Any],
                   thresholds: Thresholds = DEFAULT) -> RankSummary:
    """Reduce one rank to its summary. ``run_meta``: run.json's facts (its ``gpus`` list is
    read for device names when the trace header lacks them)."""
    gpu = data.has_gpu
    dist = data.meta.get("distributed") or {}
    meta = {k: data.meta.get(k) for k in META_KEYS}
    meta["distributed"] = {k: dist[k] for k in DISTRIBUTED_KEYS if k in dist}
    return RankSummary(
        rank=data.rank, meta=meta, rank_source=data.rank_source, has_gpu=gpu,
        breakdown=breakdown.rank_parts(data),
        collectives=comms.rank_collectives(data),
        step_stats=stragglers.rank_step_stats(data),
        kernels=kernels.rank_kernel_parts(data.rank, data, thresholds) if gpu else None,
        efficiency=efficiency.rank_efficiency(data.rank, data, run_meta) if gpu else None,
    )
