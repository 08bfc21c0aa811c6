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

from dataclasses import dataclass, field, fields, replace
from typing import Any

import pandas as pd
from profkit.analyzers import measurements
from profkit.analyzers.measure.steps import apply_step_marker, marker_candidates
from profkit.analyzers.measurements import used_steps  # noqa: F401 - read from here too
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


def _value(name: str) -> property:
    return property(lambda self: self.values.get(name),
                    doc=f"The rank's ``{name}`` measurement (None where its step did not run).")


@datacodec.register
@dataclass
class RankSummary:
    """What the reduce needs of one rank (see module doc); picklable, no events.
    ``values`` holds one value per measurement with a per-rank step, by its name in
    :data:`profkit.analyzers.measurements.MEASUREMENTS` (None where the step does not run:
    the GPU-only ones on a rank without GPU events, ``cpu_ops`` on one with them)."""

    rank: int
    meta: dict[str, Any]  # trimmed header facts; ``source`` is the trace file
    rank_source: str
    has_gpu: bool
    values: dict[str, Any] = field(default_factory=dict)

    breakdown = _value("breakdown")  # breakdown.rank_parts plus steps_info
    collectives = _value("collectives")  # (collectives, their overlapped GPU work)
    step_stats = _value("stragglers")  # the step statistics stragglers are judged on
    kernels = _value("kernels")
    efficiency = _value("efficiency")  # (efficiency row, NVML row or None)
    transfers = _value("transfers")  # copies by direction and memory
    cpu_ops = _value("cpu_ops")  # ranks without GPU events: their CPU op totals
    roofline = _value("roofline")  # roofline rows and facts

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
    """Reduce one rank to its summary: every registered measurement's per-rank step
    (:func:`profkit.analyzers.measurements.summarize`). ``run_meta``: run.json's facts (its
    ``gpus`` list is read for device names when the trace header lacks them)."""
    steps_info = step_source(data, opts)  # may set the events' steps: before the sharing
    with data.sharing_selections():
        gpu = data.has_gpu
        inputs = measurements.RankInputs(data, run_meta, thresholds, opts, steps_info)
        return RankSummary(rank=data.rank, meta=trim_meta(data.meta),
                           rank_source=data.rank_source, has_gpu=gpu,
                           values=measurements.summarize(inputs, gpu))
