"""The caching allocator at work inside the steps: its calls to the driver (allocator
churn) and a run cut short by running out of memory.

- :func:`rank_allocator_calls`: per recorded step, the ``cudaMalloc`` / ``cudaFree`` calls
  (and the driver's ``cuMemAlloc`` / ``cuMemFree``, HIP's) the trace's runtime events hold,
  with their time and the GPU-idle time spent inside them. A warm caching allocator makes
  none in a steady step: it reuses the blocks it holds. ``cudaFree`` of many blocks in every
  step followed by ``cudaMalloc`` of them again is the cache being emptied each step
  (``torch.cuda.empty_cache()`` in the loop); near capacity it is also what the allocator
  does to retry a failing allocation.
- :func:`oom_cut`: a rank whose capture ended in an out-of-memory error (the run's error
  record, ``run.json`` / ``ranks/rank{R}.json``, as ``collectors/capture`` writes it when
  the job raises) or whose last step's memory climbs to the device's capacity: the step it
  failed in (cut short, so no step of the timing), the last allocation the trace saw and
  the allocation that failed when the error says its size.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.allocations import capacity_bytes
from profkit.analyzers.measure.peaklive import device_peak_live

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask
from profkit.model import RankData

MALLOC_RE = r"^(?:cudaMalloc|cuMemAlloc|hipMalloc)(?:_v\d+)?$"
FREE_RE = r"^(?:cudaFree|cuMemFree|hipFree)(?:_v\d+)?$"
CALL_COLUMNS = ("rank", "step", "used", "malloc_calls", "malloc_ns", "free_calls", "free_ns",
                "idle_ns", "step_ns")
OOM_COLUMNS = ("rank", "device", "step", "error", "tried_bytes", "last_alloc_bytes",
               "last_allocated_bytes", "last_reserved_bytes", "capacity_bytes", "source",
               "live")
TOP_LIVE = 5  # the largest holders an out-of-memory names
OOM_TEXT = re.compile(r"out of memory", re.IGNORECASE)
TRIED_RE = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
REFILL_NS = 100_000  # a call's stall reaches the next GPU work at most this far after it
CLIMB = 1.10  # the cut step's allocated peak at least this times every earlier step's


def rank_allocator_calls(data: RankData, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step of ``steps`` (the rank's ``step_breakdown``: step, step_ns, used) with
    the allocator's driver calls in the step's CPU range (:data:`CALL_COLUMNS`); ``idle_ns``:
    the time the GPU idled inside them (none of its kernels ran while they did)."""
    rt = data.of_kinds((S.KIND_RUNTIME, S.KIND_DRIVER), (S.NAME, S.STEP, S.TS_NS, S.DUR_NS))
    malloc = category_mask(rt[S.NAME], MALLOC_RE)
    free = category_mask(rt[S.NAME], FREE_RE)
    calls = rt[(malloc | free) & (rt[S.STEP] >= 0).to_numpy()]
    if steps is None or steps.empty:
        return pd.DataFrame(columns=list(CALL_COLUMNS))
    table = steps[[S.STEP, "step_ns", "used"]].copy()
    is_free = category_mask(calls[S.NAME], FREE_RE)
    step, dur = calls[S.STEP].to_numpy(), calls[S.DUR_NS].to_numpy(np.int64)
    steps_of_table = table[S.STEP].tolist()
    for column, flag in (("malloc", False), ("free", True)):  # count and ns per step
        mine = is_free == flag
        found, at, count = np.unique(step[mine], return_inverse=True, return_counts=True)
        ns = np.zeros(len(found), dtype=np.int64)
        np.add.at(ns, at, dur[mine])
        counts, sums = (dict(zip(found.tolist(), v.tolist())) for v in (count, ns))
        table[f"{column}_calls"] = np.array([counts.get(s, 0) for s in steps_of_table], np.int64)
        table[f"{column}_ns"] = np.array([sums.get(s, 0) for s in steps_of_table], np.int64)
    table["idle_ns"] = _idle_inside(data, calls, table[S.STEP].to_numpy())
    table.insert(0, "rank", data.rank)
    table["used"] = table["used"].astype(bool)
    return table[list(CALL_COLUMNS)].reset_index(drop=True)


def _idle_inside(data: RankData, calls: pd.DataFrame, steps: np.ndarray) -> np.ndarray:
    """Per step, the ns the GPU idled from the start of each allocator call until it got
    work again (the call's stall: the call itself, then the launch that follows it, at most
    :data:`REFILL_NS` after it; later GPU idle is another cause's)."""
    out = np.zeros(len(steps), np.int64)
    if calls.empty:
        return out
    gpu = data.gpu_events
    starts = np.sort(gpu[S.TS_NS].to_numpy(), kind="stable")  # quick on ops in time order
    busy = iv.union(gpu[S.TS_NS].to_numpy(), (gpu[S.TS_NS] + gpu[S.DUR_NS]).to_numpy())
    for i, step in enumerate(steps.tolist()):
        mine = calls[(calls[S.STEP] == step).to_numpy()]
        if mine.empty:
            continue
        begin = mine[S.TS_NS].to_numpy()
        end = begin + mine[S.DUR_NS].to_numpy()
        pos = np.searchsorted(starts, end)  # the next GPU work after each call; none: its end
        nxt = starts[np.minimum(pos, len(starts) - 1)] if len(starts) else end
        nxt = np.where(pos < len(starts), nxt, end)
        spans = iv.union(begin, np.clip(nxt, end, end + REFILL_NS))
        out[i] = iv.total(spans) - iv.total(iv.intersect(spans, busy))
    return out


def rank_error(run_meta: dict | None, rank: int) -> str:
    """The error the rank's capture ended with ("" when none is recorded): its own status
    file's (``rank_errors``), else run.json's, which is rank 0's."""
    meta = run_meta or {}
    text = (meta.get("rank_errors") or {}).get(str(rank))
    if text:
        return str(text)
    err = meta.get("error")
    if rank == 0 and isinstance(err, dict) and (err.get("type") or err.get("message")):
        return f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
    return ""


def tried_bytes(error: str) -> float:
    """The size of the failing allocation PyTorch's message names ("Tried to allocate
    35.52 GiB"), NaN when it names none."""
    found = TRIED_RE.search(error or "")
    return float(found.group(1)) * UNITS[found.group(2)] if found else float("nan")


def oom_cut(data: RankData, run_meta: dict | None, capacity_bytes: float,
            near_frac: float) -> dict | None:
    """The rank's out-of-memory, None when it had none (row of :data:`OOM_COLUMNS`). Its
    step: that of the trace's first failed allocation (``[OutOfMemory]``, ``source``
    "trace"); else the last recorded step, when the run's error record says out of memory
    (``source`` "error") or when that step's allocated peak climbs past every earlier step's
    (by :data:`CLIMB`) to ``near_frac`` of the device (``source`` "climb")."""
    if data.steps.empty:
        return None
    error = rank_error(run_meta, data.rank)
    said = bool(OOM_TEXT.search(error))
    mem = data.table("memory")
    mem = mem[(mem[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA).to_numpy()] if len(mem) else mem
    failed = mem[mem[S.OUT_OF_MEMORY].to_numpy(bool)] if len(mem) else mem
    failed = failed[(failed[S.STEP] >= 0).to_numpy()] if len(failed) else failed
    last = int(failed[S.STEP].iat[0]) if len(failed) else int(data.steps[S.STEP].max())
    mem = mem[~mem[S.OUT_OF_MEMORY].to_numpy(bool)] if len(mem) else mem
    in_last = mem[(mem[S.STEP] == last).to_numpy()] if len(mem) else mem
    if len(failed):
        source = "trace"
    elif said:
        source = "error"
    elif _climbs(mem, in_last, last, capacity_bytes, near_frac):
        source = "climb"
    else:
        return None
    if len(failed):  # what the trace saw before the failure
        in_last = in_last[(in_last[S.TS_NS] <= failed[S.TS_NS].iat[0]).to_numpy()]
    allocs = in_last[(in_last[S.BYTES] > 0).to_numpy()] if len(in_last) else in_last
    lastrow = allocs.iloc[-1] if len(allocs) else None
    tried = tried_bytes(error)
    if len(failed) and not np.isfinite(tried):
        tried = float(failed[S.BYTES].iat[0])
    return {"rank": data.rank, "device": int(lastrow[S.DEVICE]) if lastrow is not None else -1,
            "step": last, "error": error, "tried_bytes": tried,
            "last_alloc_bytes": _num(lastrow, S.BYTES),
            "last_allocated_bytes": _num(lastrow, S.ALLOCATED_BYTES),
            "last_reserved_bytes": float(in_last[S.RESERVED_BYTES].max()) if len(in_last)
            else float("nan"),
            "capacity_bytes": capacity_bytes, "source": source}


def _climbs(mem: pd.DataFrame, in_last: pd.DataFrame, last: int, capacity: float,
            near_frac: float) -> bool:
    if in_last.empty or not capacity > 0:
        return False
    peak = float(in_last[S.ALLOCATED_BYTES].max())
    before = mem[((mem[S.STEP] >= 0) & (mem[S.STEP] < last)).to_numpy()]
    earlier = float(before[S.ALLOCATED_BYTES].max()) if len(before) else 0.0
    reserved = float(in_last[S.RESERVED_BYTES].max())
    return reserved >= near_frac * capacity and peak >= CLIMB * earlier


def _num(row, column: str) -> float:
    return float(row[column]) if row is not None else float("nan")



def rank_oom(data: RankData, run_meta: dict | None, near_frac: float) -> dict | None:
    """:func:`oom_cut` on the rank's device (the one its memory events name most, else its
    run.json device), its capacity as the allocations measurement reads it; found once per
    rank and arguments (the breakdown and the allocator measurement both ask), read only."""
    return data.derived(_rank_oom, _Facts(run_meta), near_frac)


class _Facts:
    """run.json's facts as a key of :meth:`RankData.derived`: equal when their JSON is."""

    def __init__(self, meta: dict | None) -> None:
        self.meta = meta
        self.key = json.dumps(meta, sort_keys=True, default=repr)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Facts) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)


def _rank_oom(data: RankData, facts: _Facts, near_frac: float) -> dict | None:
    run_meta = facts.meta
    mem = data.table("memory")
    cuda = mem[S.DEVICE][(mem[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA).to_numpy()] if len(mem) \
        else pd.Series([], dtype=np.int64)
    ranks = (run_meta or {}).get("ranks") or {}
    device = int(cuda.mode().iat[0]) if len(cuda) else int(
        (ranks.get(str(data.rank)) or {}).get("device", 0) or 0)
    cut = oom_cut(data, run_meta, capacity_bytes(data.meta, run_meta or {}, device), near_frac)
    if cut is not None:
        cut["live"] = _live_at(data, device, cut["step"])
    return cut


def _live_at(data: RankData, device: int, step: int) -> str:
    """The largest holders at the step's allocated peak: "op (GB, allocations); ..." (text,
    so that the table stays one of plain columns)."""
    mem = data.table("memory")
    dev = mem[((mem[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA) & (mem[S.DEVICE] == device)).to_numpy()
              & ~mem[S.OUT_OF_MEMORY].to_numpy(bool)]
    found = device_peak_live(dev.reset_index(drop=True), data, {step: 0}) if len(dev) else None
    if found is None:
        return ""
    return "; ".join(f"{r['op']}{' in ' + r['annotation'] if r['annotation'] else ''} "
                     f"({r['live_bytes'] / 1e9:.2f} GB, {int(r['count'])})"
                     for r in found[0].head(TOP_LIVE).to_dict("records"))


def rank_allocator(data: RankData, steps: pd.DataFrame, run_meta: dict | None,
                   near_frac: float) -> dict:
    """The per-rank value: the allocator calls per step and the out-of-memory (or None)."""
    return {"calls": rank_allocator_calls(data, steps), "oom": rank_oom(data, run_meta, near_frac)}


def combine_allocator(values: list[dict | None]) -> dict[str, pd.DataFrame]:
    """``allocator_calls`` (every rank's steps) and ``memory_oom`` (one row per rank that
    ran out of memory)."""
    values = [v for v in values if v is not None]
    calls = [v["calls"] for v in values if len(v["calls"])]
    ooms = [v["oom"] for v in values if v["oom"] is not None]
    return {"allocator_calls": pd.concat(calls, ignore_index=True) if calls
            else pd.DataFrame(columns=list(CALL_COLUMNS)),
            "memory_oom": pd.DataFrame(ooms, columns=list(OOM_COLUMNS))}
