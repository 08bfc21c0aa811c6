"""What the Runs table and the charts' time axis say of a run beside its analysis, without
reading its events: the GPU each analysed rank ran on, the capture date and the time origin
of its charts (the timeline's).

The GPUs come from the analysis (its ``efficiency`` table names each GPU rank's device);
the date from run.json's ``started_ns``, else, like the time origin, from the start of the
first profiled step. The analysis has no step times, so those are read from each rank's
small ``steps`` table in the ingest cache that :func:`profkit.analyzers.executor.analyze_run`
wrote beside the traces (never the events, unless a rank has no steps); a trace without a
cache entry is read again (slow, but the same answer).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.model import clock_offset_ns, step_spans
from profkit.run import cache, discover, runmeta

log = logging.getLogger(__name__)
NO_GPU = "no GPU events"


def facts(analysis, path: Path) -> dict[str, Any]:
    """``{"gpus", "date", "origin_ns"}`` of the run at ``path`` analysed as ``analysis``."""
    meta = _run_json(Path(path))
    starts = step_starts(analysis, meta)
    return {"gpus": gpu_names(analysis), "date": capture_date(meta, starts),
            "origin_ns": origin_ns(starts)}


def gpu_names(analysis) -> str:
    """``2 x NVIDIA H200``: the GPU each analysed rank ran on, counted (run.json lists
    every GPU of the host, also those no rank used); a rank without GPU work counts as
    :data:`NO_GPU`."""
    eff = analysis.table("efficiency")
    named = {}
    if {"rank", "device", "device_name"} <= set(eff.columns):
        for rank, device, name in zip(eff["rank"], eff["device"], eff["device_name"]):
            named[int(rank)] = str(name) if name else f"GPU {int(device)}"
    ranks = analysis.run.get("ranks_analyzed") or []
    counts = Counter(named.get(int(r), NO_GPU) for r in ranks)
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "-"


def capture_date(meta: dict[str, Any], starts: dict[int, tuple[int, int]]) -> str:
    """``YYYY-MM-DD HH:MM`` (UTC) of run.json's start, else of the first profiled step."""
    started = meta.get("started_ns")
    if not started:
        cpu = [s[0] for s in starts.values() if s[0] is not None]
        started = min(cpu) if cpu else None
    if not started:
        return "-"
    return datetime.fromtimestamp(started / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def origin_ns(starts: dict[int, tuple[int, int]]) -> int:
    """The charts' time 0: the start of the earliest step of any rank (its CPU range or
    its GPU work, whichever began first), else the earliest event
    (:func:`profkit.dashboard.timeline.data.origin_ns` of the run with its events)."""
    stepped = [s[1] for s in starts.values() if s[0] is not None]
    if stepped:
        return min(stepped)
    firsts = [s[1] for s in starts.values() if s[1] is not None]
    return min(firsts) if firsts else 0


def step_starts(analysis, meta: dict[str, Any]) -> dict[int, tuple[int | None, int | None]]:
    """rank -> (first step's CPU start, first step's start or, without steps, first
    event's start), ns on rank 0's clock; None where the rank has neither."""
    files = analysis.run.get("rank_files") or {}
    out = {}
    for rank in analysis.run.get("ranks_analyzed") or []:
        paths = [Path(p) for p in files.get(str(rank)) or []]
        offset = clock_offset_ns(meta, int(rank))
        cpu, first = _rank_starts(paths)
        out[int(rank)] = (None if cpu is None else cpu - offset,
                          None if first is None else first - offset)
    return out


def _rank_starts(paths: list[Path]) -> tuple[int | None, int | None]:
    steps = [s for s in (_steps(p) for p in paths) if len(s)]
    if steps:
        frame = pd.concat(steps, ignore_index=True)
        return int(frame[S.TS_NS].min()), int(step_spans(frame)[0].min())
    firsts = [t for t in (_first_event(p) for p in paths) if t is not None]
    return None, (min(firsts) if firsts else None)


def _steps(trace: Path) -> pd.DataFrame:
    table = _cached_table(trace, "steps")
    return table if table is not None else _ingested(trace, "steps")


def _first_event(trace: Path) -> int | None:
    table = _cached_table(trace, "events", [S.TS_NS])
    if table is None:
        table = _ingested(trace, "events")
    return int(table[S.TS_NS].min()) if len(table) else None


def _cached_table(trace: Path, name: str, columns: list[str] | None = None):
    """One table of the trace's ingest cache entry (None when it has none): the entry's
    meta file is written last, so a committed entry has every table."""
    try:
        key = cache.cache_key(trace)
        folder = cache.cache_dir_for(trace)
        if not (folder / f"{key}.meta.json").exists():
            return None
        return pd.read_parquet(folder / f"{key}.{name}.parquet", columns=columns)
    except (OSError, ValueError) as exc:
        log.debug("%s: no cached %s table (%s)", trace, name, exc)
        return None


def _ingested(trace: Path, name: str) -> pd.DataFrame:
    from profkit.run import loader

    res = loader.ingest_file(str(trace))
    if res.error or res.tables is None:
        return pd.DataFrame({S.TS_NS: np.empty(0, np.int64)})
    return res.tables[name]


def _run_json(path: Path) -> dict[str, Any]:
    """run.json's validated facts (its problems are the analysis' notes already)."""
    if not path.is_dir():
        return {}
    try:
        return runmeta.read_run_meta(discover.run_folder(path))[0]
    except (OSError, ValueError):
        return {}
