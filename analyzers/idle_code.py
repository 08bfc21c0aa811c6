"""Naming the code: which host ranges fill the GPU's idle time.

For each instant the charged-time model blames on the host (cpu_launch, host_sync,
data_loading), the innermost recorded range on the launching thread at that instant (a CPU
op, a user annotation, a Python frame when the trace has stacks, a runtime call) is the code
the GPU was waiting for. Summed per range name (with the user-code frame or outermost op
around it, e.g. ``train.py(88): log_metrics -> aten::item``), that says *why* the GPU idled,
in ms per step. Instants outside any recorded range are plain Python between ops.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask

CODE_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION, S.KIND_PYTHON, S.KIND_RUNTIME, S.KIND_DRIVER,
              S.KIND_SYNC)
SKIP_RE = r"^ProfilerStep#"
UNRECORDED = "(Python between recorded ops; capture with_stack=True to see where)"
LIBRARY_RE = r"site-packages|dist-packages|/torch/|/lib/python|<built-in|^torch/|^<frozen"
_LIBRARY = re.compile(LIBRARY_RE)
TOP = 8
COLUMNS = ("rank", "part", "code", "idle_ns")


def idle_code(events: pd.DataFrame, by_thread: dict, rank: int) -> pd.DataFrame:
    """Rows (rank, part, code, idle_ns): GPU-idle ns per host part and code label, the
    largest first (at most :data:`TOP` labels per part)."""
    rows = []
    for (thread, part), idle in by_thread.items():
        if len(idle[0]) == 0:
            continue
        host = events[(events[S.TID] == thread).to_numpy()
                      & events[S.KIND].isin(CODE_KINDS).to_numpy()]
        host = host[~category_mask(host[S.NAME], SKIP_RE)]
        for code, ns in _attribute(host, idle).items():
            rows.append((rank, part, code, ns))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    if table.empty:
        return table.astype({"rank": "int64", "idle_ns": "int64"})
    table = table.groupby(["rank", "part", "code"], as_index=False)["idle_ns"].sum()
    table = table.sort_values("idle_ns", ascending=False)
    return table.groupby("part", sort=False).head(TOP).reset_index(drop=True)


def _attribute(host: pd.DataFrame, idle: iv.Intervals) -> dict[str, int]:
    """Idle ns by the label of the innermost range covering each idle instant."""
    start = host[S.TS_NS].to_numpy(np.int64)
    end = start + host[S.DUR_NS].to_numpy(np.int64)
    near = _overlapping(start, end, idle)
    order = near[np.lexsort((-(end[near] - start[near]), start[near]))]
    seg_start, seg_end, seg_owner, parent = _innermost(start[order], end[order])
    covered = _cover(idle, seg_end) - _cover(idle, seg_start)
    names = host[S.NAME].astype(str).to_numpy()[order]
    kinds = host[S.KIND].astype(str).to_numpy()[order]
    per_owner = np.bincount(seg_owner, weights=covered, minlength=len(order)) \
        if len(seg_owner) else np.zeros(0)
    user_above, outer_above = _ancestors(names, kinds, parent)
    out: dict[str, int] = {}
    for owner in np.flatnonzero(per_owner > 0):  # each range labelled once
        label = _label(int(owner), names, user_above, outer_above)
        out[label] = out.get(label, 0) + int(per_owner[owner])
    rest = iv.total(idle) - int(covered.sum())
    if rest > 0:
        out[UNRECORDED] = out.get(UNRECORDED, 0) + rest
    return out


def _overlapping(start: np.ndarray, end: np.ndarray, idle: iv.Intervals) -> np.ndarray:
    """Indices of the ranges that overlap the idle set (their ancestors overlap too)."""
    k = np.searchsorted(idle[1], start, side="right")
    ok = k < len(idle[1])
    ok[ok] = idle[0][k[ok]] < end[ok]
    return np.flatnonzero(ok)


def _innermost(start: np.ndarray, end: np.ndarray):
    """Split time into segments each covered by one innermost range (ranges sorted by start,
    longer first; properly nested on one thread): (seg_start, seg_end, owner, parent)."""
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    seg_s, seg_e, seg_o = [], [], []
    stack: list[int] = []
    cursor = 0
    s_list, e_list = start.tolist(), end.tolist()
    for i in range(n + 1):
        t = s_list[i] if i < n else None
        while stack and (t is None or e_list[stack[-1]] <= t):
            top = stack.pop()
            if e_list[top] > cursor:
                seg_s.append(max(cursor, s_list[top]))
                seg_e.append(e_list[top])
                seg_o.append(top)
            cursor = max(cursor, e_list[top])
        if t is None:
            break
        if stack and t > cursor:
            seg_s.append(cursor)
            seg_e.append(t)
            seg_o.append(stack[-1])
        cursor = max(cursor, t)
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    return (np.array(seg_s, np.int64), np.array(seg_e, np.int64),
            np.array(seg_o, np.int64), parent)


def _cover(idle: iv.Intervals, t: np.ndarray) -> np.ndarray:
    """Idle ns before each time ``t``."""
    starts, ends = idle
    lengths = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, t, side="right") - 1
    inside = np.where(k >= 0, np.clip(t - starts[np.maximum(k, 0)], 0,
                                      (ends - starts)[np.maximum(k, 0)]), 0)
    return lengths[np.maximum(k, 0)] * (k >= 0) + inside


def _ancestors(names: np.ndarray, kinds: np.ndarray, parent: np.ndarray):
    """Per range: the nearest user-code Python frame above it and the outermost CPU op or
    annotation above it (-1 when none), in one pass (a parent comes before its children)."""
    n = len(parent)
    user_above = np.full(n, -1, dtype=np.int64)
    outer_above = np.full(n, -1, dtype=np.int64)
    is_user = [k == S.KIND_PYTHON and not _library(str(nm)) for k, nm in zip(kinds, names)]
    is_op = [k in (S.KIND_CPU_OP, S.KIND_ANNOTATION) for k in kinds]
    for i, p in enumerate(parent.tolist()):
        if p >= 0:
            user_above[i] = p if is_user[p] else user_above[p]
            outer_above[i] = outer_above[p] if outer_above[p] >= 0 else (p if is_op[p] else -1)
    return user_above, outer_above


def _label(owner: int, names: np.ndarray, user_above: np.ndarray,
           outer_above: np.ndarray) -> str:
    """The innermost range's name, prefixed by the nearest user-code Python frame above it
    (with stacks) or else the outermost op above it."""
    inner = names[owner]
    if user_above[owner] >= 0:
        return f"{_short(names[user_above[owner]])} -> {_short(inner)}"
    outer = outer_above[owner]
    if outer >= 0 and names[outer] != inner:
        return f"{_short(names[outer])} -> {_short(inner)}"
    return _short(inner)


@functools.lru_cache(maxsize=65536)
def _library(name: str) -> bool:
    return _LIBRARY.search(name) is not None


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
