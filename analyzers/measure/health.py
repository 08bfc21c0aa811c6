"""What a rank's trace can and cannot show: missing kernel records, CUDA-graph capture, a
window too short to judge.

- Kernel records lost: the host launched work (launch calls with a correlation id) but the
  trace holds no GPU activity for most of them. That happens when CUPTI's activity buffers
  fill up (very many kernels in the recorded window) or GPU activity was not flushed before
  the trace was written; the breakdown of such a rank would call every instant idle.
- Graph capture: inside ``cudaStreamBeginCapture``...``EndCapture`` launches are recorded
  into a graph and nothing runs, so a capture window looks like a host launching thousands
  of kernels to an idle GPU. It is set-up, not execution.
- Collapsed time: (almost) every event starts at one instant (timestamps lost or
  overwritten). Durations may still be real, but nothing measured between events (idle
  time, waits, skew, bandwidth over a window) means anything.
- Too short: a trace without steps whose GPU work is a single event or spans under 50 us
  (one small copy): its shares say nothing of the job.
"""

from __future__ import annotations

import numpy as np
from profkit.analyzers.measure.steps import capture_calls, capture_spans

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask
from profkit.model import RankData

KERNEL_LAUNCH_RE = r"^(?:cuda|hip|cu)(?:LaunchKernel|LaunchCooperativeKernel|ModuleLaunchKernel|ExtModuleLaunchKernel)|^cuLaunchKernel"
GRAPH_LAUNCH_RE = r"^(?:cuda|hip|cu)GraphLaunch"
MISSING_FRAC = 0.5  # more than this share of launches without GPU records: records were lost
COLLAPSED_FRAC = 0.9  # more than this share of a rank's events at one instant: no timeline
MIN_WINDOW_NS = 50_000  # a step-less trace's GPU window shorter than this: too short to judge


def rank_health(data: RankData) -> dict:
    """Counts behind the checks (see module doc); plain numbers."""
    events = data.events
    host = data.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), (S.NAME, S.CORRELATION, S.TS_NS))
    gpu = data.gpu_events
    capture = capture_spans(events)
    launches = host[category_mask(host[S.NAME], KERNEL_LAUNCH_RE)
                    & (host[S.CORRELATION] >= 0).to_numpy()]
    in_capture = _inside(launches[S.TS_NS].to_numpy(), capture)
    outside = launches[~in_capture]
    ran = outside[S.CORRELATION].isin(gpu[S.CORRELATION]).to_numpy()
    return {
        "kernel_launches": int(len(outside)),
        "launches_with_gpu_record": int(ran.sum()),
        "gpu_records": int(len(gpu)),
        "captured_launches": int(in_capture.sum()),
        "capture_ns": iv.total(capture),
        "capture_windows": int(len(capture[0])),
        "capture_calls": capture_calls(events),
        "graph_launches": int(category_mask(host[S.NAME], GRAPH_LAUNCH_RE).sum()),
        "steps_recorded": int(len(data.steps)),
        "gpu_window_ns": int((gpu[S.TS_NS] + gpu[S.DUR_NS]).max() - gpu[S.TS_NS].min())
        if len(gpu) else 0,
        **_instants(events[S.TS_NS].to_numpy()),
    }


def kernel_launch_calls(data: RankData) -> int:
    """The rank's kernel launch calls (runtime or driver), with GPU records or not."""
    host = data.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), (S.NAME,))
    return int(category_mask(host[S.NAME], KERNEL_LAUNCH_RE).sum())


def _instants(ts_ns: np.ndarray) -> dict:
    """How many events there are, and how many of them start at the most common instant."""
    if not len(ts_ns):
        return {"events": 0, "events_at_one_instant": 0}
    ts_ns = np.sort(ts_ns, kind="stable")  # the same values; quick on events in time order
    edges = np.flatnonzero(np.diff(ts_ns)) + 1
    runs = np.diff(np.concatenate(([0], edges, [len(ts_ns)])))
    return {"events": int(len(ts_ns)), "events_at_one_instant": int(runs.max())}


def too_short(health: dict) -> bool:
    """A trace without steps whose GPU work is one event, or spans less than
    :data:`MIN_WINDOW_NS`: whatever the host did around it, the shares of so short a window
    say nothing of what bounds the job (one 1 us copy read as "host sync bound: 100%")."""
    if health.get("steps_recorded", 1) or "gpu_window_ns" not in health:
        return False
    n = health.get("gpu_records", 0)
    return 0 < n and (n < 2 or health["gpu_window_ns"] < MIN_WINDOW_NS)


def time_collapsed(health: dict) -> bool:
    """(Almost) every event of the rank starts at one instant."""
    n = health.get("events", 0)
    return n >= 2 and health.get("events_at_one_instant", 0) > COLLAPSED_FRAC * n


def records_lost(health: dict) -> bool:
    """Most kernel launches outside graph capture have no GPU record in the trace."""
    n = health["kernel_launches"]
    return n >= 20 and health["launches_with_gpu_record"] < (1 - MISSING_FRAC) * n


def capture_only(health: dict) -> bool:
    """The trace records graph capture and (almost) nothing executing."""
    captured = health["captured_launches"] > 0 or health["capture_calls"] >= 20
    return captured and health["gpu_records"] <= 0.05 * max(
        health["captured_launches"] + health["kernel_launches"], 1)


def _inside(points: np.ndarray, spans: iv.Intervals) -> np.ndarray:
    if len(spans[0]) == 0:
        return np.zeros(len(points), bool)
    k = np.searchsorted(spans[0], points, side="right") - 1
    return (k >= 0) & (points < spans[1][np.maximum(k, 0)])
