"""What holds GPU memory at its peak: the live allocations at the instant the allocator's
total allocated peaks, grouped by the CPU op that made them (the rank tables ``memory`` and
``events``).

Each ``[memory]`` event is an instant on the CPU thread that allocated or freed; an
allocation and its free share the block's (device, address). Pairing them in time order,
the allocations made at or before the peak event and not freed by then are live at the
peak; the rest of the allocator's total there was allocated before the trace began (the
weights, optimizer state and buffers of earlier steps: no event of the trace made them).
So the live bytes add up to the peak event's own ``Total Allocated``, to the byte, when the
trace holds every event of the device since its first.

The op of an allocation is the innermost CPU op on its thread whose range holds it, the
allocator's own factory ops (``aten::empty``, ``aten::empty_strided`` ...) skipped for the
op that called them; its annotation is the innermost ``record_function`` / profkit mark or
``nn.Module`` range around it (``ProfilerStep#`` aside), "" when none. The op running at
the peak is the peak event's op.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import as_text, category_mask, distinct, values_in
from profkit.model import RankData

LIVE_COLUMNS = ("rank", "device", "step", "op", "annotation", "allocated_before_step",
                "live_bytes", "count")
PEAK_COLUMNS = ("rank", "device", "step", "ts_ns", "allocated_bytes", "reserved_bytes",
                "op", "annotation", "live_allocations", "before_trace_bytes")
BEFORE_TRACE = "(allocated before the trace)"
UNKNOWN_OP = "(no enclosing op)"
# The allocator's factory ops: an allocation inside one is charged to the op that called it.
FACTORY_OP_RE = (r"^aten::(?:empty|empty_like|empty_strided|new_empty|new_empty_strided|"
                 r"resize_|zeros|zeros_like|new_zeros|zero_|fill_)$")
STEP_MARK_RE = r"^ProfilerStep#"
MODULE_RE = r"^nn\.Module: "
HOST_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION, S.KIND_PYTHON)


def rank_peak_live(data: RankData, used: dict[int, int] | None) -> dict[str, pd.DataFrame]:
    """``memory_live`` (:data:`LIVE_COLUMNS`) and ``memory_peak`` (:data:`PEAK_COLUMNS`) of
    one rank: at the allocated peak of each device over the used steps (``used``: step ->
    ns; every recorded step when None or none of them has memory events)."""
    mem = data.table("memory")
    empty = {"memory_live": _empty(LIVE_COLUMNS), "memory_peak": _empty(PEAK_COLUMNS)}
    if mem.empty:
        return empty
    mem = mem[(mem[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA).to_numpy()
              & ~mem[S.OUT_OF_MEMORY].to_numpy(bool)].reset_index(drop=True)
    lives, peaks = [], []
    for device, dev in mem.groupby(S.DEVICE, sort=True):
        found = device_peak_live(dev.reset_index(drop=True), data, used)
        if found is not None:
            lives.append(found[0].assign(rank=data.rank, device=int(device)))
            peaks.append(found[1] | {"rank": data.rank, "device": int(device)})
    if not peaks:
        return empty
    live = pd.concat(lives, ignore_index=True)[list(LIVE_COLUMNS)]
    return {"memory_live": live, "memory_peak": pd.DataFrame(peaks)[list(PEAK_COLUMNS)]}


def peak_index(dev: pd.DataFrame, used: dict[int, int] | None) -> int | None:
    """Row of the first event at the allocated peak of the used steps (of every step with
    events where no used step has any); None without events in steps."""
    steps = dev[S.STEP].to_numpy()
    chosen = np.isin(steps, list(used or {}))
    if not chosen.any():
        chosen = steps >= 0
    if not chosen.any():
        return None
    allocated = np.where(chosen, dev[S.ALLOCATED_BYTES].to_numpy(), -1)
    return int(np.argmax(allocated))


def free_rows(dev: pd.DataFrame) -> np.ndarray:
    """For each event of one device (time order), the row of the free that ends its block:
    the next event of the same address when that is a free; -1 for a free, for a block
    never freed in the trace, and for an event without an address. An address allocated
    twice with no free between (events lost) ends the first block at the second."""
    n = len(dev)
    addr = dev[S.ADDR].to_numpy()
    order = np.lexsort((np.arange(n), addr))
    same_next = np.zeros(n, bool)
    same_next[:-1] = addr[order][1:] == addr[order][:-1]
    nxt = np.full(n, -1, np.int64)
    nxt[order[:-1]] = np.where(same_next[:-1], order[1:], -1)
    ends = np.full(n, -1, np.int64)
    alloc = (dev[S.BYTES].to_numpy() > 0) & (addr >= 0)
    has_next = alloc & (nxt >= 0)
    ends[has_next] = nxt[has_next]  # a free ends it; so does (lost events) a new allocation
    return ends


def device_peak_live(dev: pd.DataFrame, data: RankData,
                     used: dict[int, int] | None) -> tuple[pd.DataFrame, dict] | None:
    """(live allocations by op at the peak, the peak's row) of one device's events."""
    p = peak_index(dev, used)
    if p is None:
        return None
    ends = free_rows(dev)
    nbytes = dev[S.BYTES].to_numpy()
    rows = np.arange(len(dev))
    live = (rows <= p) & (nbytes > 0) & ((ends < 0) | (ends > p))
    total = int(dev[S.ALLOCATED_BYTES].iat[p])
    step = int(dev[S.STEP].iat[p])
    step_start = _step_start_ns(data, step)
    picked = dev[live]
    query_ts = np.append(picked[S.TS_NS].to_numpy(), dev[S.TS_NS].iat[p])
    query_tid = np.append(picked[S.TID].to_numpy(), dev[S.TID].iat[p])
    ops, notes = enclosing(data.of_kinds(HOST_KINDS, (S.TID, S.KIND, S.NAME, S.TS_NS, S.DUR_NS)),
                           query_ts, query_tid)
    table = pd.DataFrame({"step": step, "op": ops[:-1], "annotation": notes[:-1],
                          "allocated_before_step": picked[S.TS_NS].to_numpy() < step_start,
                          "live_bytes": picked[S.BYTES].to_numpy(np.int64), "count": 1})
    table = _by_holder(table)
    before = total - int(table["live_bytes"].sum())
    if before:  # blocks the trace saw no allocation of (negative: events were lost)
        table = pd.concat([table, pd.DataFrame([{
            "step": step, "op": BEFORE_TRACE, "annotation": "", "allocated_before_step": True,
            "live_bytes": before, "count": int(_pre_trace_blocks(dev, ends, p))}])],
            ignore_index=True)
    table = table.sort_values("live_bytes", ascending=False, kind="stable")
    peak = {"step": step, "ts_ns": int(dev[S.TS_NS].iat[p]), "allocated_bytes": total,
            "reserved_bytes": int(dev[S.RESERVED_BYTES].iat[p]), "op": ops[-1],
            "annotation": notes[-1], "live_allocations": int(live.sum()),
            "before_trace_bytes": before}
    return table.reset_index(drop=True), peak


def _by_holder(table: pd.DataFrame) -> pd.DataFrame:
    """The live bytes and count summed per (step, op, annotation, allocated_before_step), in
    order of first appearance: ``groupby(keys, sort=False).agg(...)`` of a few hundred
    allocations, grouped by a dict (pandas' grouping cost ~3 ms here)."""
    keys = ["step", "op", "annotation", "allocated_before_step"]
    if not len(table) or table[keys].isna().any().any():  # pandas leaves those rows out
        return (table.groupby(keys, sort=False)
                .agg(live_bytes=("live_bytes", "sum"), count=("count", "sum")).reset_index())
    at: dict[tuple, int] = {}
    which = np.array([at.setdefault(key, len(at)) for key in
                      zip(*(table[k].tolist() for k in keys))], dtype=np.intp)
    out = table.iloc[np.unique(which, return_index=True)[1]][keys].reset_index(drop=True)
    for column in ("live_bytes", "count"):
        sums = np.zeros(len(at), dtype=np.int64)
        np.add.at(sums, which, table[column].to_numpy(np.int64))
        out[column] = sums
    return out


def _pre_trace_blocks(dev: pd.DataFrame, ends: np.ndarray, p: int) -> int:
    """Blocks live at the peak that the trace never saw allocated: not countable (their
    frees after the peak are the only trace of them); the frees after ``p`` of addresses
    with no allocation before them, a lower bound."""
    nbytes, addr = dev[S.BYTES].to_numpy(), dev[S.ADDR].to_numpy()
    seen = set(addr[:p + 1][nbytes[:p + 1] > 0].tolist())
    later = (np.arange(len(dev)) > p) & (nbytes < 0)
    return len(set(addr[later].tolist()) - seen)


def _step_start_ns(data: RankData, step: int) -> int:
    steps = data.steps
    if steps.empty or step < 0:
        return -1
    row = steps[steps[S.STEP] == step]
    return int(row[S.TS_NS].iat[0]) if len(row) else -1


def enclosing(host: pd.DataFrame, ts: np.ndarray, tid: np.ndarray) -> tuple[list, list]:
    """(op, annotation) around each instant (``ts`` ns on thread ``tid``) among ``host``'s
    ranges (events of :data:`HOST_KINDS`): the innermost CPU op holding it (factory ops
    skipped), :data:`UNKNOWN_OP` when none; the innermost annotation or module range, ""
    when none."""
    mine = host[S.TID].isin(distinct(tid)).to_numpy()
    is_op = (mine & values_in(host[S.KIND], (S.KIND_CPU_OP,))
             & ~category_mask(host[S.NAME], FACTORY_OP_RE))
    is_note = mine & ((values_in(host[S.KIND], (S.KIND_ANNOTATION,))
                       & ~category_mask(host[S.NAME], STEP_MARK_RE))
                      | (values_in(host[S.KIND], (S.KIND_PYTHON,))
                         & category_mask(host[S.NAME], MODULE_RE)))
    ops = _innermost(host[is_op], ts, tid, UNKNOWN_OP)
    notes = _innermost(host[is_note], ts, tid, "")
    return ops, notes


def _innermost(ranges: pd.DataFrame, ts: np.ndarray, tid: np.ndarray, none: str) -> list:
    """The name of the innermost range of ``ranges`` on each query's thread that holds its
    instant (:func:`profkit.intervals.innermost`), ``none`` where none does. That is the
    latest in nesting order of the ranges holding it, so only the ranges that hold some
    query are nested (a few hundred allocations, of a thread's tens of thousands of ops)."""
    out = np.full(len(ts), none, dtype=object)
    threads = ranges[S.TID].to_numpy()
    starts = ranges[S.TS_NS].to_numpy(np.int64)
    ends = starts + ranges[S.DUR_NS].to_numpy(np.int64)
    for thread in distinct(tid):
        qs = np.flatnonzero(tid == thread)
        rows = np.flatnonzero(threads == thread)
        points = np.sort(ts[qs])
        first = np.searchsorted(points, starts[rows], side="left")  # its first query after
        held = first < len(points)
        held[held] = points[first[held]] <= ends[rows][held]
        rows = rows[held]
        if not len(rows) or not len(qs):
            continue
        tree = iv.nesting(starts[rows], ends[rows])
        at = iv.innermost(tree, ts[qs], ts[qs])
        hit = at >= 0
        out[qs[hit]] = as_text(ranges[S.NAME].iloc[rows[at[hit]]]).to_numpy()
    return out.tolist()


def combine_peak_live(values: list[dict | None]) -> dict[str, pd.DataFrame]:
    """Every rank's ``memory_live`` and ``memory_peak``, largest holders first per rank."""
    out = {}
    for name, columns in (("memory_live", LIVE_COLUMNS), ("memory_peak", PEAK_COLUMNS)):
        frames = [v[name] for v in values if v is not None and len(v[name])]
        out[name] = (pd.concat(frames, ignore_index=True) if frames else _empty(columns))
    return out


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(columns=list(columns))
