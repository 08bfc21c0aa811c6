"""The trace's own counter samples (Chrome-trace 'C' events) as the long counters table.

A counter event carries the values of one or more series at one time: ``{"ph": "C",
"name": "GPU Memory", "ts": 12.5, "pid": 0, "args": {"allocated": 2048, "reserved": 4096}}``
is two samples, metrics ``trace:GPU Memory/allocated`` and ``trace:GPU Memory/reserved``
(schema.TRACE_METRIC_PREFIX keeps them apart from the NVML samples that share the table).
Values are in the trace's own units, which the format does not state.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.columns import us_to_ns
from profkit.trace.traceevents import CounterEvent
from profkit.validate import cap_name


class CounterSamples:
    """Collects the samples of a trace's counter events, batch by batch (times in us
    relative to the trace's base time, like its complete events)."""

    def __init__(self, ts_range_us: tuple[float, float]) -> None:
        self.ts_range_us = ts_range_us  # what places a sample within +-MAX_ABS_NS epoch ns
        self.ts_us: list[float] = []
        self.pids: list[int] = []
        self.metrics: list[str] = []
        self.values: list[float] = []
        self.dropped = 0  # samples without a usable time or a finite number as value

    def add(self, events: list[CounterEvent]) -> None:
        lo, hi = self.ts_range_us
        for ev in events:
            series = ev.args if isinstance(ev.args, dict) else {}
            ts = ev.ts if _is_number(ev.ts) and lo <= ev.ts <= hi else None
            name = ev.name if isinstance(ev.name, str) else ""
            pid = ev.pid if isinstance(ev.pid, int) and not isinstance(ev.pid, bool) else -1
            for key, value in series.items():
                number = _finite(value)
                if ts is None or number is None:
                    self.dropped += 1
                    continue
                self.ts_us.append(float(ts))
                self.pids.append(pid)
                self.metrics.append(f"{S.TRACE_METRIC_PREFIX}{name}/{key}")
                self.values.append(number)

    def frame(self, base_ns: int, gpu_pids: dict[int, int]) -> pd.DataFrame:
        """The counters table (``schema.COUNTER_COLUMNS``), sorted by metric then time.
        ``gpu_pids``: {pid: GPU index} of the trace's GPU events; a sample written under
        another pid (a CPU process) has device -1."""
        metrics = [cap_name(m) for m in self.metrics]  # names are cut like event names
        out = pd.DataFrame({
            S.TS_NS: base_ns + us_to_ns(np.array(self.ts_us, dtype=np.float64)),
            S.DEVICE: np.array([gpu_pids.get(p, -1) for p in self.pids], dtype=np.int64),
            S.METRIC: metrics,
            S.VALUE: np.array(self.values, dtype=np.float64),
        })
        out = out.sort_values([S.METRIC, S.TS_NS], kind="stable", ignore_index=True)
        out[S.METRIC] = out[S.METRIC].astype("category")
        return out

    def problems(self) -> list[str]:
        if not self.dropped:
            return []
        return [f"{self.dropped} counter samples dropped: ts missing or outside the epoch-ns "
                "range, or a value that is not a finite number"]


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> float | None:
    """``value`` as a finite float; None for anything else (text, lists, inf, NaN, an int
    past float range: JSON reads 1e400 and 10**400 too)."""
    if not _is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
