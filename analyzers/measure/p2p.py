"""Point-to-point transfers of one rank (``send`` / ``recv``), as a pipeline's stages
exchange activations and gradients, and the time their kernels spend waiting for the peer.

NCCL runs a point-to-point transfer as a ``SendRecv`` kernel, but so does it an all-to-all:
the kernel's name does not tell them apart. The op that issued it does: each communication
kernel is given the last communication op (``c10d::send``, ``c10d::recv_``,
``c10d::alltoall_base_``, ``nccl:send`` ...) its launching thread started before the launch
call (``torch.distributed.pipelining`` launches inside a ``nccl:coalesced`` range that
follows the ``c10d::send``/``c10d::recv_`` ops it coalesces).

A point-to-point kernel starts when it is launched and ends when its transfer is done: the
first part of it waits for the peer to post the other side, the rest moves the bytes. The
shortest point-to-point kernel of the rank is taken as the transfer itself (a peer that was
already there); the first ``duration - shortest`` of every other one is waiting
(:func:`wait_intervals`): the pipeline bubble, in ``charge.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, name_values, values_in
from profkit.model import RankData

P2P_OP_RE = r"^(?:c10d::(?:send|recv_|recv_any_source_|isend|irecv)|nccl:(?:send|recv))$"
COMM_OP_RE = r"^(?:c10d::|nccl:(?!coalesced))"  # ops that issue communication kernels
_LAUNCH_KINDS = (S.KIND_RUNTIME, S.KIND_DRIVER)
_EMPTY = (np.empty(0, np.int64), np.empty(0, np.int64))
P2P_COLUMNS = (S.TS_NS, S.DUR_NS, "op", S.STEP)


def p2p_ops(ev: pd.DataFrame) -> pd.DataFrame:
    """The rank's point-to-point host ops (``c10d::send``, ``c10d::recv_`` ...), with
    ``op``: ``send`` or ``recv``."""
    rows = ev[values_in(ev[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION))
              & category_mask(ev[S.NAME], P2P_OP_RE)]
    return rows.assign(op=np.where(rows[S.NAME].astype(str).str.contains("send"), "send", "recv"))


def p2p_kernels(data: RankData) -> pd.DataFrame:
    """The rank's communication kernels that a point-to-point op issued (module doc):
    ts_ns, dur_ns, op (``send`` / ``recv``), step; in time order. Found once per rank (the
    breakdown and the pipeline measurement read them)."""
    return data.derived(_p2p_kernels)


def _p2p_kernels(data: RankData) -> pd.DataFrame:
    ev = data.events
    issues = values_in(ev[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION)) \
        & category_mask(ev[S.NAME], COMM_OP_RE)
    if not (issues & category_mask(ev[S.NAME], P2P_OP_RE)).any():  # no send nor recv
        return pd.DataFrame(columns=list(P2P_COLUMNS))
    gpu = data.gpu_events
    comm = gpu[values_in(gpu[S.CLASS], (S.CLS_COMMUNICATION,))
               & values_in(gpu[S.KIND], (S.KIND_KERNEL,))]
    if comm.empty:
        return pd.DataFrame(columns=list(P2P_COLUMNS))
    issuing = ev[issues]
    launch = ev[values_in(ev[S.KIND], _LAUNCH_KINDS) & (ev[S.CORRELATION] >= 0).to_numpy()]
    launch = launch.drop_duplicates(S.CORRELATION).set_index(S.CORRELATION)
    known = comm[comm[S.CORRELATION].isin(launch.index).to_numpy()]
    call = launch.loc[known[S.CORRELATION].to_numpy()]
    op = np.full(len(known), "", dtype=object)
    call_ts, call_tid = call[S.TS_NS].to_numpy(), call[S.TID].to_numpy()
    for tid, ops in issuing.groupby(S.TID, sort=False):
        ops = ops.sort_values(S.TS_NS, kind="stable")
        mine = np.flatnonzero(call_tid == tid)
        at = np.searchsorted(ops[S.TS_NS].to_numpy(), call_ts[mine], side="right") - 1
        ok = at >= 0
        names = name_values(ops[S.NAME], str)[at[ok]]
        op[mine[ok]] = names
    p2p = category_mask(pd.Series(op, dtype="category"), P2P_OP_RE) if len(op) else np.zeros(0, bool)
    rows = known[p2p]
    out = pd.DataFrame({S.TS_NS: rows[S.TS_NS].to_numpy(np.int64),
                        S.DUR_NS: rows[S.DUR_NS].to_numpy(np.int64),
                        "op": np.where(pd.Series(op[p2p]).str.contains("send"), "send", "recv"),
                        S.STEP: rows[S.STEP].to_numpy(np.int64)})
    return out.sort_values(S.TS_NS, kind="stable").reset_index(drop=True)


def wait_intervals(kernels: pd.DataFrame) -> iv.Intervals:
    """The instants the point-to-point ``kernels`` wait for their peer: of each, its first
    ``duration - shortest duration`` (module doc)."""
    if kernels.empty:
        return _EMPTY
    start = kernels[S.TS_NS].to_numpy(np.int64)
    dur = kernels[S.DUR_NS].to_numpy(np.int64)
    wait = dur - int(dur.min())
    keep = wait > 0
    return iv.union(start[keep], start[keep] + wait[keep])
