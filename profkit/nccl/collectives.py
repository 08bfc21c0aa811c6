"""The per-rank collectives table, built from communication kernels and the
``record_param_comms`` CPU ops that carry the collective's arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify import events as classify
from profkit.columns import INT64_SAFE, category_mask, to_float, to_int, values_in

RECORD_PARAM_COMMS = "record_param_comms"
_ARG_COLUMNS = (
    "collective_arg", S.PG_NAME, S.PG_DESC, S.PG_RANKS, S.GROUP_SIZE, S.SEQ, S.COMMS_ID,
    S.DTYPE, S.IN_NELEMS, S.OUT_NELEMS, S.PEER,
)


def build_collectives(ev: pd.DataFrame, args: list) -> pd.DataFrame:
    """Collectives of one rank: each communication kernel, joined to the
    ``record_param_comms`` CPU op that issued it for the args the kernel lacks. Traces with
    no communication kernels (CPU backends) get one row per ``record_param_comms`` op, or,
    where there are none (gloo), per ``gloo:<op>`` / ``nccl:<op>`` range.
    ``args`` maps a row of ``ev`` to its decoded args."""
    arg_fn = collective_args
    is_kernel = values_in(ev[S.KIND], (S.KIND_KERNEL,))
    comm = np.flatnonzero(is_kernel & values_in(ev[S.CLASS], (S.CLS_COMMUNICATION,)))
    is_gpu = values_in(ev[S.KIND], S.GPU_KINDS)
    names = ev[S.NAME]
    rpc = np.flatnonzero(~is_gpu & values_in(names, (RECORD_PARAM_COMMS,)))
    cpu = _rows(ev, args, rpc, arg_fn)
    if len(comm):
        table = _rows(ev, args, comm, arg_fn)
        table[S.ON_GPU] = True
        table[S.CPU_TS_NS] = -1
        table = _attach_cpu_ops(ev, table, cpu, fill_time=True)
        # Old traces: record_param_comms has no args, the enclosing "nccl:<op>" range names it.
        named = _named_ranges(ev, args, ~is_gpu & category_mask(names, "^nccl:"))
        if len(named):
            table = _attach_cpu_ops(ev, table, named, fill_time=False)
        table = _fill_coalesced(ev, table, cpu)
    else:
        table = cpu if len(cpu) else _named_ranges(ev, args, ~is_gpu & category_mask(names, "^(?:gloo|nccl):"))
        table = table.copy()
        table[S.ON_GPU] = False
        table[S.CPU_TS_NS] = table[S.TS_NS]
    return _finish(table)


def _named_ranges(ev: pd.DataFrame, args: list, mask: np.ndarray) -> pd.DataFrame:
    """CPU ranges named "<backend>:<collective>", the collective taken from the name."""
    rows = np.flatnonzero(mask)
    table = _rows(ev, args, rows, collective_args)
    # the part after the first ":" of each distinct name (every one matched "<backend>:"),
    # not the names made text and split row by row
    codes = ev[S.NAME].cat.codes.to_numpy()[rows]
    distinct, inverse = np.unique(codes, return_inverse=True)
    categories = np.asarray(ev[S.NAME].cat.categories, dtype=object)
    after = np.array([str(name).split(":", 1)[1] for name in categories[distinct].tolist()]
                     + [None], dtype=object)  # the None: keeps an empty array's dtype object
    table["collective_arg"] = after[inverse.reshape(-1)]
    return table


def _rows(ev: pd.DataFrame, args: list, rows: np.ndarray, arg_fn: Callable) -> pd.DataFrame:
    base = pd.DataFrame({c: ev[c].array[rows] for c in (  # the rows only: no copy of all columns
        S.TS_NS, S.DUR_NS, S.TID, S.STREAM, S.CORRELATION, S.EXTERNAL_ID, S.STEP, S.SUBCLASS)})
    return pd.concat([base, pd.DataFrame(arg_fn(args, rows))], axis=1)


def _attach_cpu_ops(ev: pd.DataFrame, gpu: pd.DataFrame, cpu: pd.DataFrame,
                    fill_time: bool) -> pd.DataFrame:
    """Fill args the kernels lack from the CPU op that launched them: the op on the
    launching thread whose time range holds the launch call (found by correlation)."""
    if cpu.empty:
        return gpu
    corr = ev[S.CORRELATION].to_numpy()
    launch = np.flatnonzero(values_in(ev[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER)) & (corr >= 0))
    known, first = np.unique(corr[launch], return_index=True)  # the first call of each
    g_corr = gpu[S.CORRELATION].to_numpy()
    at = np.clip(np.searchsorted(known, g_corr), 0, max(len(known) - 1, 0))
    has = (known[at] == g_corr) if len(known) else np.zeros(len(gpu), bool)
    rows = np.flatnonzero(has)
    call = launch[first[at[rows]]]
    op = _op_holding(ev[S.TS_NS].to_numpy()[call], ev[S.TID].to_numpy()[call],
                     cpu[S.TS_NS].to_numpy(), cpu[S.DUR_NS].to_numpy(), cpu[S.TID].to_numpy())
    rows, op = rows[op >= 0], op[op >= 0]
    if fill_time:
        gpu.loc[rows, S.CPU_TS_NS] = cpu[S.TS_NS].to_numpy()[op]
    for col in _ARG_COLUMNS:
        mine = gpu[col].to_numpy()[rows]
        missing = pd.isna(mine) | (mine == -1)
        if missing.any():
            gpu.loc[rows[missing], col] = cpu[col].to_numpy()[op[missing]]
    return gpu


def _fill_coalesced(ev: pd.DataFrame, gpu: pd.DataFrame, cpu: pd.DataFrame) -> pd.DataFrame:
    """Kernels launched in an "nccl:coalesced" range (``batch_isend_irecv``, pipeline
    stages' send/recv, coalesced collectives) carry no group: their ``record_param_comms``
    ops ran just before the range, on the same thread. Each such kernel takes the group and
    the collective of the last of those ops that started before its launch."""
    todo = np.flatnonzero((gpu["collective_arg"].astype(object) == "coalesced").to_numpy()
                          & pd.isna(gpu[S.PG_NAME].astype(object)).to_numpy())
    if not len(todo) or cpu.empty:
        return gpu
    corr = ev[S.CORRELATION].to_numpy()
    launch = np.flatnonzero(values_in(ev[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER)) & (corr >= 0))
    by_corr = pd.Series(launch, index=corr[launch])
    by_corr = by_corr[~by_corr.index.duplicated()]
    call = by_corr.reindex(gpu[S.CORRELATION].to_numpy()[todo]).to_numpy()
    found = ~np.isnan(call)
    todo, call = todo[found], call[found].astype(np.int64)
    op = _op_holding(ev[S.TS_NS].to_numpy()[call], ev[S.TID].to_numpy()[call],
                     cpu[S.TS_NS].to_numpy(), np.full(len(cpu), np.iinfo(np.int64).max // 4),
                     cpu[S.TID].to_numpy())
    todo, op = todo[op >= 0], op[op >= 0]
    for col in ("collective_arg", S.PG_NAME, S.PG_DESC, S.PG_RANKS, S.GROUP_SIZE, S.PEER):
        gpu.loc[todo, col] = cpu[col].to_numpy()[op]
    return gpu


def _op_holding(ts: np.ndarray, tid: np.ndarray, op_ts: np.ndarray, op_dur: np.ndarray,
                op_tid: np.ndarray) -> np.ndarray:
    """For each call (start ``ts`` on thread ``tid``), the op (row of the ``op_*`` arrays) on
    its thread that started last at or before it, if the call lies inside it; else -1. Of
    ops starting at the same time, the last in ``np.argsort(op_ts)`` order (what an as-of
    join on the ops sorted by start picks)."""
    out = np.full(len(ts), -1, dtype=np.int64)
    by_start = np.argsort(op_ts, kind="quicksort")
    by_start = by_start[np.argsort(op_tid[by_start], kind="stable")]
    sorted_tid = op_tid[by_start]
    for thread in np.unique(tid):
        lo, hi = np.searchsorted(sorted_tid, thread, "left"), np.searchsorted(sorted_tid, thread, "right")
        if lo == hi:
            continue
        calls = np.flatnonzero(tid == thread)
        block = by_start[lo:hi]
        pos = np.searchsorted(op_ts[block], ts[calls], side="right") - 1
        found = pos >= 0
        cand = block[np.maximum(pos, 0)]
        inside = found & (ts[calls] <= op_ts[cand] + op_dur[cand])
        out[calls[inside]] = cand[inside]
    return out


def _finish(t: pd.DataFrame) -> pd.DataFrame:
    named = t["collective_arg"].notna()
    coll = t[S.SUBCLASS].astype(object).to_numpy().copy()
    if named.any():
        coll[named.to_numpy()] = [classify.collective_kind(x) for x in t.loc[named, "collective_arg"]]
    t[S.COLL_NAME] = pd.Categorical(coll)
    nelems = np.fmax(t[S.IN_NELEMS].to_numpy(np.float64), t[S.OUT_NELEMS].to_numpy(np.float64))
    size = t[S.DTYPE].map(lambda d: S.DTYPE_BYTES.get(str(d).lower(), np.nan) if d else np.nan)
    with np.errstate(over="ignore", invalid="ignore"):
        msg_bytes = nelems * size.to_numpy(np.float64)
    # A negative or astronomically large element count is no message: its size is unknown.
    t[S.MSG_BYTES] = np.where((msg_bytes >= 0) & (msg_bytes <= INT64_SAFE), msg_bytes, np.nan)
    for col in (S.PG_NAME, S.PG_DESC, S.PG_RANKS, S.COMMS_ID, S.DTYPE):
        t[col] = pd.Categorical(t[col].astype(object).where(t[col].notna(), "").astype(str))
    for col in (S.GROUP_SIZE, S.SEQ, S.CPU_TS_NS, S.PEER):
        t[col] = pd.to_numeric(t[col], errors="coerce").fillna(-1).astype(np.int64)
    t[S.ON_GPU] = t[S.ON_GPU].astype(bool)
    t = t.sort_values(S.TS_NS).reset_index(drop=True)
    return t[list(S.COLLECTIVE_COLUMNS)]


def collective_args(args: list, rows: np.ndarray) -> dict[str, Any]:
    """The collective argument columns of the given rows."""
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
        S.PEER: to_int([a.dst_rank if a.dst_rank is not None else a.src_rank for a in sel]),
    }
