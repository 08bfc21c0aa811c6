"""One line on the allocator's peak memory for the reports that open with the verdict (the
notebook view and ``--format html``; the text and Markdown reports have the whole
``Memory`` section): the rank-device nearest its capacity, from ``memory_ranks``."""

from __future__ import annotations

import math

from profkit.analyzers.analyze import Analysis
from profkit.analyzers.thresholds import DEFAULT


def fullest(a: Analysis):
    """The ``memory_ranks`` row of the rank-device nearest its capacity (the highest peak
    reserved), or None for a run without [memory] events."""
    ranks = a.table("memory_ranks")
    if ranks.empty:
        return None
    return ranks.sort_values("peak_reserved_bytes", ascending=False, kind="stable").iloc[0]


def batch_growth(row) -> float | None:
    """How far the batch could grow (``batch_headroom_x``) where the headroom finding would
    say it (at least ``memory_headroom_min_x``), else None."""
    grow = float(row.get("batch_headroom_x", math.nan))
    return grow if math.isfinite(grow) and grow >= DEFAULT.memory_headroom_min_x else None


def memory_line(a: Analysis) -> str | None:
    """``peak memory: 5.30 GB allocated, 5.43 GB reserved of 150.1 GB (3.6%), rank 0``, and
    how far the batch could grow where the headroom finding would say it (at least
    ``memory_headroom_min_x``); None for a run without [memory] events."""
    row = fullest(a)
    if row is None:
        return None
    ranks = a.table("memory_ranks")
    alloc, reserved = float(row["peak_allocated_bytes"]), float(row["peak_reserved_bytes"])
    cap = float(row["capacity_bytes"])
    line = f"peak memory: {alloc / 1e9:.2f} GB allocated, {reserved / 1e9:.2f} GB reserved"
    if math.isfinite(cap) and cap > 0:
        line += f" of {cap / 1e9:.1f} GB ({reserved / cap:.1%})"
    line += f", rank {int(row['rank'])}"
    if len(ranks) > 1:
        line += f" (the highest of {len(ranks)} rank-devices)"
    grow = batch_growth(row)
    if grow is not None:
        line += (f"; the batch could grow about {grow:.0f}x, if the memory that comes and "
                 "goes in a step grows with it")
    return line
