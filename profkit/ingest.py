"""Turning one decoded Kineto trace into the columnar tables of a :class:`RankData`.

Columns are built once from the typed records, then everything is vectorised: kinds and
classes are computed per unique category / name and mapped back through codes, steps by
binary search, collectives by an as-of join.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pandas as pd

from profkit import classify
from profkit import schema as S
from profkit.tracefile import Args, Trace

_EMPTY_ARGS = Args()
STEP_PREFIX = "ProfilerStep#"


def to_float(values: list) -> np.ndarray:
    """float64 array; None and non-numbers become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def to_int(values: list, missing: int = -1) -> np.ndarray:
    arr = to_float(values)
    out = np.full(len(arr), missing, dtype=np.int64)
    ok = np.isfinite(arr)
    out[ok] = arr[ok].astype(np.int64)
    return out


def us_to_ns(ts_us: np.ndarray) -> np.ndarray:
    """Microseconds (float, possibly ~1e15 for epoch-based traces) to int64 ns, without
    losing the sub-microsecond part to float64 rounding of the product."""
    whole = np.floor(ts_us)
    return whole.astype(np.int64) * 1000 + np.rint((ts_us - whole) * 1000).astype(np.int64)


def ids_to_int(values: list) -> np.ndarray:
    """pid/tid values as int64: ints as they are, other strings as a stable negative id."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    codes, uniques = pd.factorize(pd.Series(values, dtype=object).astype(str))
    mapped = np.array([_stable_id(u) for u in uniques], dtype=np.int64)
    return mapped[codes]


def _stable_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1 - zlib.crc32(text.encode())


def categorical(values: list) -> pd.Categorical:
    codes, uniques = pd.factorize(pd.Series(values, dtype=object).fillna(""))
    labels = pd.Index([str(u) for u in uniques])
    if not labels.is_unique:  # e.g. 1 and "1": merge them the slow way
        return pd.Categorical(labels[codes])
    return pd.Categorical.from_codes(codes, categories=labels)


def build_tables(trace: Trace) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(events, collectives, steps) of one trace."""
    xs = [e for e in trace.traceEvents if e.ph == "X"]
    args = [e.args or _EMPTY_ARGS for e in xs]
    ts_us = to_float([e.ts for e in xs])
    keep = np.isfinite(ts_us)
    if not keep.all():
        xs = [e for e, k in zip(xs, keep) if k]
        args = [a for a, k in zip(args, keep) if k]
        ts_us = ts_us[keep]
    base_ns = int(trace.baseTimeNanoseconds or 0)
    dur_us = np.nan_to_num(to_float([e.dur for e in xs]), nan=0.0).clip(min=0)
    names = categorical([e.name for e in xs])
    cats = categorical([e.cat for e in xs])
    kinds = _map_categorical(cats, classify.kinds_for_categories)
    pid = ids_to_int([e.pid for e in xs])
    tid = ids_to_int([e.tid for e in xs])
    ev = pd.DataFrame({
        S.TS_NS: base_ns + us_to_ns(ts_us),
        S.DUR_NS: np.rint(dur_us * 1000).astype(np.int64),
        S.NAME: names,
        S.CAT: cats,
        S.KIND: kinds,
        S.PID: pid,
        S.TID: tid,
        S.CORRELATION: to_int([a.correlation for a in args]),
        S.EXTERNAL_ID: to_int([a.external_id for a in args]),
    })
    is_gpu = ev[S.KIND].isin(S.GPU_KINDS).to_numpy()
    stream = to_int([a.stream for a in args])
    ev[S.STREAM] = np.where(is_gpu, np.where(stream >= 0, stream, tid), -1)
    device = to_int([a.device for a in args])
    ev[S.DEVICE] = np.where(is_gpu, np.where(device >= 0, device, pid), -1)
    ev[S.BLOCKS_PER_SM] = to_float([a.blocks_per_sm for a in args])
    ev[S.OCCUPANCY_PCT] = to_float([a.occupancy_pct for a in args])
    ev[S.FLOPS] = to_float([a.flops for a in args])
    ev[S.BYTES] = to_float([a.bytes for a in args])
    _classify_gpu(ev, is_gpu, args)
    steps = step_table(ev)
    ev[S.STEP] = assign_steps(ev, steps)
    coll = collective_table(ev, args)
    order = np.argsort(ev[S.TS_NS].to_numpy(), kind="stable")
    ev = ev.iloc[order].reset_index(drop=True)
    return ev[list(S.EVENT_COLUMNS)], coll, steps


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
    kernel = is_gpu & (ev[S.KIND] == S.KIND_KERNEL).to_numpy()
    idx = np.flatnonzero(kernel)
    coll_arg = np.array([args[i].collective is not None for i in idx], dtype=bool)
    by_arg = idx[coll_arg]
    for i in by_arg:
        cls[i], sub[i] = S.CLS_COMMUNICATION, classify.collective_kind(args[i].collective)
    comm_ops = ev[~is_gpu & ev[S.NAME].astype(str).str.match(classify.COMM_OP_RE.pattern).to_numpy()]
    if comm_ops.empty:
        return
    ext_ids = set(comm_ops[S.EXTERNAL_ID].to_numpy().tolist()) - {-1}
    ext = ev[S.EXTERNAL_ID].to_numpy()
    for i in idx:
        if cls[i] == S.CLS_COMPUTE and sub[i] == "other" and ext[i] in ext_ids:
            cls[i], sub[i] = S.CLS_COMMUNICATION, "other"


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
    return rows.sort_values(S.TS_NS)[list(S.STEP_COLUMNS)].reset_index(drop=True)


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


def _collective_args(args: list[Args], rows: np.ndarray) -> dict[str, Any]:
    sel = [args[i] for i in rows]
    return {
        "collective_arg": [a.collective for a in sel],
        S.PG_NAME: [None if a.pg_name is None else str(a.pg_name) for a in sel],
        S.PG_DESC: [a.pg_desc for a in sel],
        S.PG_RANKS: [None if a.pg_ranks is None else str(a.pg_ranks) for a in sel],
        S.GROUP_SIZE: to_int([a.group_size for a in sel]),
        S.SEQ: to_int([a.seq for a in sel]),
        S.COMMS_ID: [None if a.comms_id is None else str(a.comms_id) for a in sel],
        S.DTYPE: [a.dtype for a in sel],
        S.IN_NELEMS: to_float([a.in_nelems for a in sel]),
        S.OUT_NELEMS: to_float([a.out_nelems for a in sel]),
    }


def collective_table(ev: pd.DataFrame, args: list[Args]) -> pd.DataFrame:
    """One row per collective: each communication kernel, joined to the
    ``record_param_comms`` CPU op that issued it for the args the kernel lacks. Traces with
    no communication kernels (CPU backends) get one row per ``record_param_comms`` op."""
    from profkit.collectives import build_collectives

    return build_collectives(ev, args, _collective_args)
