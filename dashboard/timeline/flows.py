"""Flow arrows of the timeline: from each CUDA runtime call on a CPU thread (a kernel
launch, a copy) to the GPU work it queued, matched by the trace's correlation id, as
Perfetto draws them. Only for the events of the window (both ends in it) and only when the
CPU threads are shown; at most :data:`MAX_FLOWS`, the longest queue delays first (the ones
worth seeing). Pure: a view and each rank's lanes and events in, a table out."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.dashboard.timeline.data import CPU, GPU

from profkit import schema as S

MAX_FLOWS = 400
FLOW_COLUMNS = ["rank", "cpu_lane", "launch_ms", "gpu_lane", "start_ms", "name", "correlation"]


def _correlated(view_events: pd.DataFrame, lanes, events: pd.DataFrame, layer: str,
                kinds) -> pd.DataFrame:
    """The view's events of ``layer`` whose source event is of ``kinds`` with a correlation
    id: lane, start and end ms, name and that id."""
    mine = view_events[view_events["layer"] == layer]
    if mine.empty or lanes.events.get(layer) is None:
        return pd.DataFrame(columns=["lane", "start_ms", "end_ms", "name", "corr"])
    source = lanes.events[layer]["source"].to_numpy()[mine["row"].to_numpy(np.int64)]
    ok = source >= 0
    mine, source = mine[ok], source[ok]
    corr = events[S.CORRELATION].to_numpy()[source]
    kind = events[S.KIND].to_numpy()[source]
    keep = (corr >= 0) & np.isin(kind.astype(str), list(kinds))
    out = mine.loc[keep, ["lane", "start_ms", "end_ms", "name"]].copy()
    out["corr"] = corr[keep]
    return out


def launch_flows(view, rank_data: dict) -> pd.DataFrame:
    """FLOW_COLUMNS, one row per launch -> GPU work pair drawn in ``view`` (module doc);
    ``rank_data``: rank -> (its RankLanes, its events table)."""
    if view.mode != "events" or view.events.empty or CPU not in set(view.layer_of.values()):
        return pd.DataFrame(columns=FLOW_COLUMNS)
    parts = []
    for rank in view.ranks:
        lanes, events = rank_data[rank]
        ev = view.events[view.events["rank"] == rank]
        cpu = _correlated(ev, lanes, events, CPU, (S.KIND_RUNTIME,))
        gpu = _correlated(ev, lanes, events, GPU, S.GPU_KINDS)
        if cpu.empty or gpu.empty:
            continue
        pairs = cpu.merge(gpu, on="corr", suffixes=("_cpu", "_gpu"))
        parts.append(pd.DataFrame({
            "rank": rank, "cpu_lane": pairs["lane_cpu"].astype(str),
            "launch_ms": pairs["start_ms_cpu"], "gpu_lane": pairs["lane_gpu"].astype(str),
            "start_ms": pairs["start_ms_gpu"], "name": pairs["name_gpu"].astype(str),
            "correlation": pairs["corr"]}))
    if not parts:
        return pd.DataFrame(columns=FLOW_COLUMNS)
    flows = pd.concat(parts, ignore_index=True)
    delay = flows["start_ms"] - flows["launch_ms"]
    return flows.loc[delay.sort_values(ascending=False).index[:MAX_FLOWS]].reset_index(drop=True)
