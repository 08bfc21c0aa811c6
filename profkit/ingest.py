"""Turning one decoded Kineto trace into the columnar tables of a :class:`RankData`.

Columns are built once from the typed records, then everything is vectorised: kinds and
classes are computed per unique category / name and mapped back through codes, steps by
binary search, collectives by an as-of join.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import pandas as pd

from profkit import classify
from profkit import schema as S
from profkit.collectives import build_collectives
from profkit.columns import categorical, category_mask, ids_to_int, to_float, to_int, us_to_ns
from profkit.tracefile import Args, Trace

_EMPTY_ARGS = Args()
STEP_PREFIX = "ProfilerStep#"


def build_tables(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(events, collectives, steps) of one trace."""
    xs, args, ts_us = _complete_events(trace)
    ev = _base_columns(xs, args, ts_us, int(trace.baseTimeNanoseconds or 0))
    is_gpu = ev[S.KIND].isin(S.GPU_KINDS).to_numpy()
    _device_columns(ev, args, is_gpu)
    _classify_gpu(ev, is_gpu, args)
    steps = step_table(ev)
    ev[S.STEP] = assign_steps(ev, steps)
    steps = add_gpu_spans(steps, ev)
    coll = build_collectives(ev, args)
    order = np.argsort(ev[S.TS_NS].to_numpy(), kind="stable")
    ev = ev.iloc[order].reset_index(drop=True)
    return ev[list(S.EVENT_COLUMNS)], coll, steps


def _complete_events(trace: Trace) -> tuple[list, list[Args], np.ndarray]:
    """The 'X' events that have a timestamp, their args, and their ts in us."""
    xs = [e for e in trace.traceEvents if e.ph == "X"]
    ts_us = to_float([e.ts for e in xs])
    keep = np.isfinite(ts_us)
    if not keep.all():
        xs = [e for e, k in zip(xs, keep) if k]
        ts_us = ts_us[keep]
    return xs, [e.args or _EMPTY_ARGS for e in xs], ts_us


def _base_columns(xs: list, args: list[Args], ts_us: np.ndarray, base_ns: int) -> pd.DataFrame:
    dur_us = np.nan_to_num(to_float([e.dur for e in xs]), nan=0.0).clip(min=0)
    cats = categorical([e.cat for e in xs])
    return pd.DataFrame({
        S.TS_NS: base_ns + us_to_ns(ts_us),
        S.DUR_NS: np.rint(dur_us * 1000).astype(np.int64),
        S.NAME: categorical([e.name for e in xs]),
        S.CAT: cats,
        S.KIND: _map_categorical(cats, classify.kinds_for_categories),
        S.PID: ids_to_int([e.pid for e in xs]),
        S.TID: ids_to_int([e.tid for e in xs]),
        S.CORRELATION: to_int([a.correlation for a in args]),
        S.EXTERNAL_ID: to_int([a.external_id for a in args]),
    })


def _arg_column(args: list[Args], rows: np.ndarray, attr: str) -> np.ndarray:
    """float64 column of one arg, read only on ``rows`` (NaN elsewhere)."""
    out = np.full(len(args), np.nan)
    if len(rows):
        get = attrgetter(attr)
        out[rows] = to_float([get(args[i]) for i in rows])
    return out


def _device_columns(ev: pd.DataFrame, args: list[Args], is_gpu: np.ndarray) -> None:
    """Stream, device and the per-kind numeric args, each read only where it applies."""
    kind = ev[S.KIND].to_numpy()
    gpu_rows = np.flatnonzero(is_gpu)
    kernels = np.flatnonzero(kind == S.KIND_KERNEL)
    for col, attr, fallback in ((S.STREAM, "stream", S.TID), (S.DEVICE, "device", S.PID)):
        values = _arg_column(args, gpu_rows, attr)
        values = np.where(np.isfinite(values), values, ev[fallback].to_numpy())
        ev[col] = np.where(is_gpu, values, -1).astype(np.int64)
    ev[S.BLOCKS_PER_SM] = _arg_column(args, kernels, "blocks_per_sm")
    ev[S.OCCUPANCY_PCT] = _arg_column(args, kernels, "occupancy_pct")
    ev[S.FLOPS] = _arg_column(args, np.flatnonzero(kind == S.KIND_CPU_OP), "flops")
    copies = np.flatnonzero((kind == S.KIND_MEMCPY) | (kind == S.KIND_MEMSET))
    ev[S.BYTES] = _arg_column(args, copies, "bytes")


def _map_categorical(cat: pd.Categorical, fn) -> pd.Categorical:
    """Apply ``fn`` (unique values -> labels) to a categorical's categories."""
    labels = fn(np.asarray(cat.categories, dtype=object))
    uniq, inverse = np.unique(labels.astype(str), return_inverse=True)
    codes = np.where(cat.codes >= 0, inverse[cat.codes], -1)
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniq))


def _classify_gpu(ev: pd.DataFrame, is_gpu: np.ndarray, args: list[Args]) -> None:
    n = len(ev)
    cls = np.full(n, "", dtype=object)
    sub = np.full(n, "", dtype=object)
    if is_gpu.any():
        kind_codes = ev[S.KIND].cat.codes.to_numpy()[is_gpu].astype(np.int64)
        name_codes = ev[S.NAME].cat.codes.to_numpy()[is_gpu].astype(np.int64)
        keys = kind_codes * (len(ev[S.NAME].cat.categories) + 1) + name_codes
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        kinds = np.asarray(ev[S.KIND].cat.categories, dtype=object)[kind_codes[first]]
        names = np.asarray(ev[S.NAME].cat.categories, dtype=object)[name_codes[first]]
        c, s = classify.classify_gpu_names(kinds, names)
        cls[is_gpu] = c[inverse]
        sub[is_gpu] = s[inverse]
        _upgrade_comm_kernels(ev, is_gpu, args, cls, sub)
    ev[S.CLASS] = pd.Categorical(cls)
    ev[S.SUBCLASS] = pd.Categorical(sub)


def _upgrade_comm_kernels(ev, is_gpu, args, cls, sub) -> None:
    """Kernels carrying collective args, or launched by a communication CPU op, are
    communication even when their name is not a known communication kernel."""
    idx = np.flatnonzero(is_gpu & (ev[S.KIND] == S.KIND_KERNEL).to_numpy())
    named = [(i, args[i].collective) for i in idx if args[i].collective is not None]
    for i, collective in named:
        cls[i], sub[i] = S.CLS_COMMUNICATION, classify.collective_kind(collective)
    comm_ops = ~is_gpu & category_mask(ev[S.NAME], classify.COMM_OP_RE.pattern)
    if not comm_ops.any():
        return
    ext = ev[S.EXTERNAL_ID].to_numpy()
    comm_ids = np.setdiff1d(np.unique(ext[comm_ops]), [-1])
    unknown = idx[(cls[idx] == S.CLS_COMPUTE) & (sub[idx] == "other")]
    launched = unknown[np.isin(ext[unknown], comm_ids)]
    cls[launched], sub[launched] = S.CLS_COMMUNICATION, "other"


def step_table(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per ProfilerStep#N range on the CPU (the outermost when repeated)."""
    names = ev[S.NAME]
    cats = names.cat.categories
    step_names = cats[cats.str.startswith(STEP_PREFIX)]
    mask = names.isin(step_names) & ~ev[S.KIND].isin(S.GPU_KINDS + (S.KIND_GPU_ANNOTATION,))
    rows = ev.loc[mask, [S.NAME, S.TS_NS, S.DUR_NS]]
    number = pd.to_numeric(rows[S.NAME].astype(str).str.slice(len(STEP_PREFIX)), errors="coerce")
    rows = rows.assign(**{S.STEP: number}).dropna(subset=[S.STEP])
    rows = rows.sort_values(S.DUR_NS, ascending=False).drop_duplicates(S.STEP)
    rows[S.STEP] = rows[S.STEP].astype(np.int64)
    return rows.sort_values(S.TS_NS)[[S.STEP, S.TS_NS, S.DUR_NS]].reset_index(drop=True)


def add_gpu_spans(steps: pd.DataFrame, ev: pd.DataFrame) -> pd.DataFrame:
    """Bounds of the GPU work each step launched (-1 where it launched none)."""
    gpu = ev[ev[S.KIND].isin(S.GPU_KINDS).to_numpy() & (ev[S.STEP] >= 0).to_numpy()]
    spans = pd.DataFrame({S.STEP: gpu[S.STEP], "start": gpu[S.TS_NS],
                          "end": gpu[S.TS_NS] + gpu[S.DUR_NS]})
    spans = spans.groupby(S.STEP).agg(start=("start", "min"), end=("end", "max"))
    out = steps.copy()
    out[S.GPU_START_NS] = out[S.STEP].map(spans["start"]).fillna(-1).astype(np.int64)
    out[S.GPU_END_NS] = out[S.STEP].map(spans["end"]).fillna(-1).astype(np.int64)
    return out[list(S.STEP_COLUMNS)]


def assign_steps(ev: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Step of every event: CPU events by the step range holding their start; GPU events by
    the step of the runtime call that launched them (correlation), else by their start."""
    out = np.full(len(ev), -1, dtype=np.int64)
    if steps.empty:
        return out
    starts = steps[S.TS_NS].to_numpy()
    ends = starts + steps[S.DUR_NS].to_numpy()
    numbers = steps[S.STEP].to_numpy()
    ts = ev[S.TS_NS].to_numpy()
    pos = np.searchsorted(starts, ts, side="right") - 1
    inside = (pos >= 0) & (ts < ends[np.clip(pos, 0, None)])
    out[inside] = numbers[pos[inside]]
    kind = ev[S.KIND]
    launch = kind.isin((S.KIND_RUNTIME, S.KIND_DRIVER)).to_numpy() & (ev[S.CORRELATION] >= 0).to_numpy()
    gpu = kind.isin(S.GPU_KINDS).to_numpy() & (ev[S.CORRELATION] >= 0).to_numpy()
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
