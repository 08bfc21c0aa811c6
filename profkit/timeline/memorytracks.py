"""The allocator's memory (the rank table ``memory``: Kineto's ``[memory]`` events) as
counter series for the merged timeline: per GPU device, the allocator's total allocated and
reserved bytes after each event, thinned to at most :data:`MAX_POINTS` points a series.

A 10-step run holds ~25,000 events per rank; Perfetto draws a counter as a step line, so
each series keeps, per time bucket, its first and last point and the points of its lowest
and highest value: the line's shape at the bucket's resolution, and every peak exactly (the
run's highest point is its bucket's highest, so it is never dropped). Times are the table's,
already on the run's aligned clock. CPU events (device type 0) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from profkit import schema as S

MAX_POINTS = 2000  # per series (device and metric): 4 per bucket
SERIES = (("allocated_bytes", S.ALLOCATED_BYTES), ("reserved_bytes", S.RESERVED_BYTES))


def peak_keeping(ts: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS) -> np.ndarray:
    """Indices (ascending) of the points to keep of a series in time order: all of them when
    there are at most ``max_points``, else per time bucket the first, the last and the first
    points of the lowest and the highest value. Allocations come in bursts, so most buckets
    of an even split are empty: the buckets are doubled from ``max_points // 4`` while the
    points kept still fit."""
    n = len(values)
    if n <= max_points:
        return np.arange(n)
    buckets = max(max_points // 4, 1)
    kept = _bucket_extremes(ts, values, buckets)
    while buckets < n:
        finer = _bucket_extremes(ts, values, buckets * 2)
        if len(finer) > max_points:
            break
        kept, buckets = finer, buckets * 2
    return kept


def _bucket_extremes(ts: np.ndarray, values: np.ndarray, buckets: int) -> np.ndarray:
    n = len(values)
    span = float(ts[-1] - ts[0])
    if span > 0:
        bucket = np.minimum(((ts - ts[0]) / span * buckets).astype(np.int64), buckets - 1)
    else:  # every point at one instant: buckets of consecutive points instead
        bucket = np.arange(n) * buckets // n
    starts = np.flatnonzero(np.diff(bucket, prepend=-1))
    ends = np.append(starts[1:], n) - 1
    segment = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    keep = [starts, ends]
    for reduce in (np.maximum, np.minimum):
        extreme = reduce.reduceat(values, starts)
        hits = np.flatnonzero(values == extreme[segment])
        first = np.unique(segment[hits], return_index=True)[1]
        keep.append(hits[first])
    return np.unique(np.concatenate(keep))


def memory_series(memory: pd.DataFrame, start_ns: int | None = None,
                  end_ns: int | None = None,
                  max_points: int | None = None) -> Iterator[tuple[str, int, np.ndarray, np.ndarray]]:
    """``(metric, device, ts_ns, value)`` of each GPU device's allocated and reserved series
    (:func:`peak_keeping`, at most ``max_points`` each, :data:`MAX_POINTS` by default), the
    events in [start_ns, end_ns) only."""
    if memory.empty:
        return
    gpu = memory[memory[S.DEVICE_TYPE].to_numpy() == S.DEVICE_TYPE_CUDA]
    ts_all = gpu[S.TS_NS].to_numpy()
    keep = np.ones(len(gpu), dtype=bool)
    if start_ns is not None:
        keep &= ts_all >= start_ns
    if end_ns is not None:
        keep &= ts_all < end_ns
    gpu = gpu[keep]
    for device, rows in gpu.groupby(S.DEVICE, sort=True):
        rows = rows.sort_values(S.TS_NS, kind="stable")  # cycles of a rank come one by one
        ts = rows[S.TS_NS].to_numpy()
        for metric, column in SERIES:
            values = rows[column].to_numpy(np.int64)
            chosen = peak_keeping(ts, values, max_points or MAX_POINTS)
            yield metric, int(device), ts[chosen], values[chosen]
