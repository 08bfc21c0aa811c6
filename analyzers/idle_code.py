"""Naming the code: which host ranges fill the GPU's idle time.

For each instant the charged-time model blames on the host (cpu_launch, host_sync,
data_loading), the innermost recorded range on the launching thread at that instant (a CPU
op, a user annotation, a Python frame when the trace has stacks, a runtime call) is the code
the GPU was waiting for. Summed per range name (with the user-code frame or outermost op
around it, e.g. ``train.py(88): log_metrics -> aten::item``), that says *why* the GPU idled,
in ms per step. Instants outside any recorded range are plain Python between ops.
"""

from __future__ import annotations

import re
from typing import NamedTuple

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


class _Host(NamedTuple):
    """The columns the attribution reads, as arrays (taken once, not per thread)."""

    start: np.ndarray  # ns
    end: np.ndarray
    name: np.ndarray  # name codes (-1: no name)
    kind: np.ndarray  # kind codes
    names: np.ndarray  # name of each code, "nan" last (code -1, as astype(str) writes it)
    kind_names: list
    library: dict  # name code -> library code or not (filled as asked)


def idle_code(events: pd.DataFrame, by_thread: dict, rank: int) -> pd.DataFrame:
    """Rows (rank, part, code, idle_ns): GPU-idle ns per host part and code label, the
    largest first (at most :data:`TOP` labels per part)."""
    rows = []
    is_code = (events[S.KIND].isin(CODE_KINDS).to_numpy()
               & ~category_mask(events[S.NAME], SKIP_RE))
    tid = events[S.TID].to_numpy()
    host = None
    for (thread, part), idle in by_thread.items():
        if len(idle[0]) == 0:
            continue
        host = host or _host_columns(events)
        for code, ns in _attribute(host, np.flatnonzero(is_code & (tid == thread)), idle).items():
            rows.append((rank, part, code, ns))
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    if table.empty:
        return table.astype({"rank": "int64", "idle_ns": "int64"})
    table = table.groupby(["rank", "part", "code"], as_index=False)["idle_ns"].sum()
    table = table.sort_values("idle_ns", ascending=False)
    return table.groupby("part", sort=False).head(TOP).reset_index(drop=True)


def _host_columns(events: pd.DataFrame) -> _Host:
    start = events[S.TS_NS].to_numpy(np.int64)
    names = np.asarray(events[S.NAME].cat.categories.astype(str), dtype=object)
    return _Host(start, start + events[S.DUR_NS].to_numpy(np.int64),
                 events[S.NAME].cat.codes.to_numpy().astype(np.int64),
                 events[S.KIND].cat.codes.to_numpy(), np.append(names, "nan"),
                 list(events[S.KIND].cat.categories), {})


def _attribute(host: _Host, rows: np.ndarray, idle: iv.Intervals) -> dict[str, int]:
    """Idle ns by the label of the innermost range among ``rows`` covering each idle instant."""
    start, end = host.start[rows], host.end[rows]
    near = _overlapping(start, end, idle)
    order = near[np.lexsort((-(end[near] - start[near]), start[near]))]
    seg_start, seg_end, seg_owner, parent = _innermost(start[order], end[order])
    covered = _cover(idle, seg_end) - _cover(idle, seg_start)
    out: dict[str, int] = {}
    hit = covered > 0
    if hit.any():
        # labels are computed once per owning range, not once per segment
        owners, inverse = np.unique(seg_owner[hit], return_inverse=True)
        owner_ns = np.zeros(len(owners), np.int64)
        np.add.at(owner_ns, inverse, covered[hit])
        labels = _labels(owners, host, rows[order], parent)
        for label, ns in zip(labels, owner_ns.tolist()):
            out[label] = out.get(label, 0) + ns
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


def _labels(owners: np.ndarray, host: _Host, rows: np.ndarray, parent: np.ndarray) -> list[str]:
    """The label of each owner range (an index into ``rows``, the ranges in sweep order):
    its name, prefixed by the nearest user-code Python frame above it (with stacks) or else
    the outermost op above it (when named otherwise)."""
    codes, kind_codes, names = host.name[rows], host.kind[rows], host.names

    def of_kind(*wanted: str) -> np.ndarray:
        return np.isin(kind_codes, [host.kind_names.index(k) for k in wanted
                                    if k in host.kind_names])

    python = of_kind(S.KIND_PYTHON)
    user = python & ~_is_library(host, codes, python)
    op = of_kind(S.KIND_CPU_OP, S.KIND_ANNOTATION)
    nearest_user, outermost_op = _ancestors(parent, user, op)
    up = parent[owners]
    above = up >= 0
    user_of = np.where(above, nearest_user[np.maximum(up, 0)], -1)
    outer_of = np.where(above, outermost_op[np.maximum(up, 0)], -1)
    cache: dict[tuple[int, int, int], str] = {}
    out = []
    for inner, u, o in zip(codes[owners].tolist(), user_of.tolist(), outer_of.tolist()):
        key = (inner, codes[u] if u >= 0 else -2, codes[o] if o >= 0 else -2)
        if key not in cache:
            cache[key] = _label(names[inner], names[key[1]] if u >= 0 else None,
                                names[key[2]] if o >= 0 else None)
        out.append(cache[key])
    return out


def _is_library(host: _Host, codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Whether each of ``codes`` names library code, matched once per name (and only for
    the names of ``rows``, the Python frames: a rank has thousands of names)."""
    for code in np.unique(codes[rows]).tolist():
        if code not in host.library:
            host.library[code] = _LIBRARY.search(host.names[code]) is not None
    lookup = np.zeros(len(host.names), dtype=bool)
    if host.library:
        lookup[list(host.library)] = list(host.library.values())
    return lookup[codes]


def _ancestors(parent: np.ndarray, user: np.ndarray, op: np.ndarray):
    """For every range, the nearest user-code Python frame and the outermost op among
    itself and its ancestors (-1 where none), by pointer doubling over ``parent``."""
    idx = np.arange(len(parent))
    nearest = np.where(user, idx, -1)
    outer = np.where(op, idx, -1)
    up = parent.copy()
    while True:
        live = np.flatnonzero(up >= 0)
        if not len(live):
            return nearest, outer
        nxt = up[live]
        fill = nearest[live] < 0
        nearest[live[fill]] = nearest[nxt[fill]]
        found = outer[nxt] >= 0
        outer[live[found]] = outer[nxt[found]]
        up[live] = up[nxt]


def _label(inner: str, user: str | None, outer: str | None) -> str:
    if user is not None:
        return f"{_short(user)} -> {_short(inner)}"
    if outer is not None and outer != inner:
        return f"{_short(outer)} -> {_short(inner)}"
    return _short(inner)


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
