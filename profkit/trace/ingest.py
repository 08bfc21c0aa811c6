"""Turning one decoded Kineto trace into the columnar tables of a :class:`RankData`.

Columns are built once from the typed records, then everything is vectorised: kinds and
classes are computed per unique category / name and mapped back through codes, steps by
binary search, collectives by an as-of join.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify import comm as comm_evidence
from profkit.classify import events as classify
from profkit.columns import as_text, category_mask, values_in
from profkit.nccl.collectives import build_collectives
from profkit.trace.accumulate import SparseArgs, accumulate
from profkit.trace.header import base_time_ns
from profkit.trace.tracefile import Trace
from profkit.validate import Problems

STEP_PREFIX = "ProfilerStep#"
MAX_STEP = 1 << 53


class Tables(NamedTuple):
    frames: dict[str, pd.DataFrame]  # {name: table} of every table of schema.RANK_TABLES
    metadata: list  # the trace's 'M' (metadata) events: process and thread names


def build_tables(trace: Trace) -> Tables:
    """The tables of one trace (what was dropped or repaired is added to its problems)."""
    acc = accumulate(trace, base_time_ns(trace.header.baseTimeNanoseconds, Problems()))
    ev = acc.frame()
    args = acc.coll_args
    is_gpu = values_in(ev[S.KIND], S.GPU_KINDS)
    _classify_gpu(ev, is_gpu, args)
    steps = step_table(ev)
    ev[S.STEP] = assign_steps(ev, steps)
    steps = add_gpu_spans(steps, ev)
    coll = build_collectives(ev, args)
    counters = acc.counters.frame(acc.base_ns, _gpu_pids(ev, is_gpu) if acc.counters.values else {})
    memory = acc.memory.frame(acc.base_ns)
    memory[S.STEP] = steps_holding(memory[S.TS_NS].to_numpy(), steps)
    # Not consolidated into one block per dtype (.copy()): that sped a rank's analysis up by
    # ~8% in one warm process but not in the pool's fresh workers, where the copy raised each
    # worker's peak by ~30 MB (BENCHMARKS.md).
    frames = {"events": ev[list(S.EVENT_COLUMNS)], "collectives": coll, "steps": steps,
              "counters": counters, "memory": memory}
    missing = {t.name for t in S.RANK_TABLES if t.cached} - set(frames)
    if missing:  # a table that schema.RANK_TABLES says the cache stores is built here
        raise NotImplementedError(f"ingest builds no {', '.join(sorted(missing))} table")
    return Tables(frames, acc.metadata)


def _gpu_pids(ev: pd.DataFrame, is_gpu: np.ndarray) -> dict[int, int]:
    """{pid: GPU index} of the GPU events (Kineto writes a GPU's events under one pid)."""
    pairs = ev.loc[is_gpu, [S.PID, S.DEVICE]].drop_duplicates(S.PID)
    return dict(zip(pairs[S.PID].tolist(), pairs[S.DEVICE].tolist()))


def unusable_reason(events: pd.DataFrame, raw_count: int, problems: list[str]) -> str | None:
    """Why a trace holds nothing to read (no event of a profiler category left after
    decoding), naming what was dropped; None when it holds something."""
    if (events[S.KIND] != S.KIND_OTHER).any():
        return None
    if not raw_count:
        why = "the trace holds no events"
    elif len(events):
        why = f"its {len(events)} timed event(s) have no profiler category (not a PyTorch trace?)"
    else:
        why = f"none of its {raw_count} events is a complete event with a usable time"
    dropped = "; ".join(problems)
    return f"no usable events: {why}" + (f" ({dropped})" if dropped else "")


def _classify_gpu(ev: pd.DataFrame, is_gpu: np.ndarray, args: SparseArgs) -> None:
    """Class of GPU events by name and user rules (classify), then by the evidence around
    them (comm_evidence); "" on every other row."""
    rows = np.flatnonzero(is_gpu)
    cls = sub = np.empty(0, dtype=object)
    if len(rows):
        kind_codes = ev[S.KIND].cat.codes.to_numpy()[rows].astype(np.int64)
        name_codes = ev[S.NAME].cat.codes.to_numpy()[rows].astype(np.int64)
        keys = kind_codes * (len(ev[S.NAME].cat.categories) + 1) + name_codes
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        kinds = np.asarray(ev[S.KIND].cat.categories, dtype=object)[kind_codes[first]]
        names = np.asarray(ev[S.NAME].cat.categories, dtype=object)[name_codes[first]]
        named = classify.classify_gpu_names(kinds, names)
        # of the GPU rows alone (comm_evidence.upgrade reads and changes them so)
        cls, sub = named.classes[inverse], named.subclasses[inverse]
        comm_evidence.upgrade(ev, is_gpu, args, cls, sub, named.strength[inverse])
    ev[S.CLASS] = _categorical(cls, rows, len(ev))
    ev[S.SUBCLASS] = _categorical(sub, rows, len(ev))


def _categorical(values: np.ndarray, rows: np.ndarray, n: int) -> pd.Categorical:
    """``pd.Categorical`` of ``n`` strings: ``values`` on the ``rows`` (the GPU rows: a
    tenth of a rank), "" on every other; its categories read from the values alone."""
    if not n:
        return pd.Categorical(np.empty(0, dtype=object))
    # the distinct values by pandas' hash (None kept as a value: sorted() refuses it, as
    # pd.Categorical would), each coded once
    local, distinct = pd.factorize(values, use_na_sentinel=False)
    distinct = distinct.tolist()
    cats = sorted(set(distinct) | ({""} if len(rows) < n else set()))
    index = {c: i for i, c in enumerate(cats)}
    codes = np.full(n, index.get("", -1), dtype=np.int32)
    codes[rows] = np.array([index[v] for v in distinct], dtype=np.int32)[local]
    return pd.Categorical.from_codes(codes, categories=pd.Index(cats))


def step_table(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per ProfilerStep#N range on the CPU (the outermost when repeated)."""
    mask = category_mask(ev[S.NAME], "^" + re.escape(STEP_PREFIX)) \
        & ~values_in(ev[S.KIND], S.GPU_KINDS + (S.KIND_GPU_ANNOTATION,))
    rows = ev.loc[mask, [S.NAME, S.TS_NS, S.DUR_NS]]
    number = pd.to_numeric(as_text(rows[S.NAME]).str.slice(len(STEP_PREFIX)), errors="coerce")
    # A step with no duration holds nothing, and a number past 2**53 is no step count.
    sane = (number >= 0) & (number <= MAX_STEP) & (rows[S.DUR_NS] > 0)
    rows = rows.assign(**{S.STEP: number})[sane.to_numpy()]
    rows = rows.sort_values(S.DUR_NS, ascending=False).drop_duplicates(S.STEP)
    rows[S.STEP] = rows[S.STEP].astype(np.int64)
    return rows.sort_values(S.TS_NS)[[S.STEP, S.TS_NS, S.DUR_NS]].reset_index(drop=True)


def add_gpu_spans(steps: pd.DataFrame, ev: pd.DataFrame) -> pd.DataFrame:
    """Bounds of the GPU work each step launched (-1 where it launched none)."""
    gpu = values_in(ev[S.KIND], S.GPU_KINDS) & (ev[S.STEP] >= 0).to_numpy()
    step = ev[S.STEP].to_numpy()[gpu]
    start = ev[S.TS_NS].to_numpy()[gpu]
    end = start + ev[S.DUR_NS].to_numpy()[gpu]
    out = steps.copy()
    wanted = out[S.STEP].to_numpy()
    out[S.GPU_START_NS] = _per_step(step, start, np.minimum, wanted)
    out[S.GPU_END_NS] = _per_step(step, end, np.maximum, wanted)
    return out[list(S.STEP_COLUMNS)]


def _per_step(step: np.ndarray, values: np.ndarray, reduce: np.ufunc,
              wanted: np.ndarray) -> np.ndarray:
    """``reduce`` (np.minimum, np.maximum) of the int64 ``values`` of each step in
    ``wanted``, -1 for a step without any. Where one is without, the others pass through
    float64, as the Series.map(...).fillna(-1).astype(int64) this replaces gave them
    (rounded to float precision: ns since the epoch keep ~256 ns)."""
    order = np.argsort(step, kind="stable")
    step, values = step[order], values[order]
    first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]]) if len(step) else np.empty(0, int)
    steps, reduced = step[first], (reduce.reduceat(values, first) if len(first)
                                   else np.empty(0, np.int64))
    at = np.minimum(np.searchsorted(steps, wanted), max(len(steps) - 1, 0))
    found = (steps[at] == wanted) if len(steps) else np.zeros(len(wanted), dtype=bool)
    if found.all():
        return reduced[at].astype(np.int64, copy=False)
    return np.where(found, reduced[at].astype(np.float64) if len(steps) else -1.0,
                    -1.0).astype(np.int64)


def steps_holding(ts_ns: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    """The step whose CPU range [start, start + dur) holds each time, -1 where none does
    (what a CPU event, or an allocation the CPU made, belongs to)."""
    out = np.full(len(ts_ns), -1, dtype=np.int64)
    if steps.empty:
        return out
    starts = steps[S.TS_NS].to_numpy()
    ends = starts + steps[S.DUR_NS].to_numpy()
    pos = np.searchsorted(starts, ts_ns, side="right") - 1
    inside = (pos >= 0) & (ts_ns < ends[np.clip(pos, 0, None)])
    out[inside] = steps[S.STEP].to_numpy()[pos[inside]]
    return out


def assign_steps(ev: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of every event: CPU events by the step range holding their start; GPU events by
    the step of the runtime call that launched them (correlation), else by their start."""
    out = steps_holding(ev[S.TS_NS].to_numpy(), steps)
    if steps.empty:
        return out
    kind = ev[S.KIND]
    launch = values_in(kind, (S.KIND_RUNTIME, S.KIND_DRIVER)) & (ev[S.CORRELATION] >= 0).to_numpy()
    gpu = values_in(kind, S.GPU_KINDS) & (ev[S.CORRELATION] >= 0).to_numpy()
    if launch.any() and gpu.any():
        lcorr = ev[S.CORRELATION].to_numpy()[launch]
        lstep = out[launch]
        order = np.argsort(lcorr, kind="stable")
        lcorr, lstep = lcorr[order], lstep[order]
        gcorr = ev[S.CORRELATION].to_numpy()[gpu]
        at = np.clip(np.searchsorted(lcorr, gcorr), 0, len(lcorr) - 1)
        found = lcorr[at] == gcorr
        gsteps = out[gpu]
        gsteps[found] = lstep[at[found]]
        out[gpu] = gsteps
    return out
