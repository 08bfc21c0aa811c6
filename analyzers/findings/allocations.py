"""Findings on the memory the caching allocator holds (``measure/allocations.py``): the
headroom a rank leaves, as the factor by which its batch could grow before running out."""

from __future__ import annotations

import numpy as np
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

GB = 1e9  # decimal, as the evidence and the NVML memory finding print bytes


def allocation_findings(result: Result, th: Thresholds) -> list[Finding]:
    """One info finding per rank and device whose batch could grow at least
    ``th.memory_headroom_min_x`` times; near capacity is NVML's ``memory`` finding."""
    table = result.tables.get("memory_ranks")
    if table is None or table.empty:
        return []
    out = []
    for row in table.to_dict("records"):
        grow = float(row["batch_headroom_x"])
        if not (np.isfinite(grow) and grow >= th.memory_headroom_min_x):
            continue
        out.append(_headroom(row, grow))
    return out


def _headroom(row: dict, grow: float) -> Finding:
    rank = int(row["rank"])
    evidence = {k: _plain(row[k]) for k in (
        "device", "peak_allocated_bytes", "peak_reserved_bytes", "capacity_bytes", "peak_frac",
        "resident_bytes", "transient_bytes", "batch_headroom_x")}
    return Finding(
        category="allocations", severity="info", rank=rank, evidence=evidence,
        message=(f"rank {rank}: peak memory {row['peak_reserved_bytes'] / GB:.1f} of "
                 f"{row['capacity_bytes'] / GB:.1f} GB ({row['peak_frac']:.1%}): the batch "
                 f"could grow about {grow:.0f}x before running out of memory, if the "
                 f"{row['transient_bytes'] / GB:.2f} GB that comes and goes in a step grows "
                 f"with it and the {row['resident_bytes'] / GB:.2f} GB that stays does not"),
        recommendation=("Memory does not limit this job: a larger batch per GPU or fewer "
                        "gradient-accumulation steps would fit. Whether they are faster "
                        "depends on what bounds the step."))


def _plain(value):
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    return round(value, 4) if isinstance(value, float) else value
