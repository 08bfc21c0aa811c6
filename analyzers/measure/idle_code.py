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
from profkit.columns import category_mask, distinct, unique_rows, values_in

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
    parts_by_thread: dict = {}
    for (thread, part), idle in by_thread.items():
        if len(idle[0]):
            parts_by_thread.setdefault(thread, {})[part] = idle
    rows = []
    recorded = values_in(events[S.KIND], CODE_KINDS) & ~category_mask(events[S.NAME], SKIP_RE) \
        if parts_by_thread else None
    for thread, parts in parts_by_thread.items():
        # the columns _Ranges reads, of the thread's code ranges, in one selection
        host = events.loc[(events[S.TID] == thread).to_numpy() & recorded,
                          [S.TS_NS, S.DUR_NS, S.NAME, S.KIND]]
        # one nesting of the thread's ranges serves every part (a range that overlaps only
        # another part's idle time owns none of this part's)
        ranges = _Ranges(host, iv.union_of(*parts.values()))
        for part, idle in parts.items():
            for code, ns in ranges.attribute(idle).items():
                rows.append((rank, part, code, ns))
    if not rows:
        return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"rank": "int64",
                                                                 "idle_ns": "int64"})
    # summed per (rank, part, code) in key order, as grouping by them gives it (a handful of
    # rows: pandas' grouping cost ~1.5 ms)
    totals: dict = {}
    for *key, ns in rows:
        totals[tuple(key)] = totals.get(tuple(key), 0) + ns
    table = pd.DataFrame([(*key, ns) for key, ns in sorted(totals.items())], columns=list(COLUMNS))
    table = table.sort_values("idle_ns", ascending=False)
    return table.groupby("part", sort=False).head(TOP).reset_index(drop=True)


class _Ranges:
    """A thread's recorded ranges near idle time, split into innermost-owner segments, each
    range's label (its name with the user frame or outermost op above it) as a name code."""

    def __init__(self, host: pd.DataFrame, near_idle: iv.Intervals) -> None:
        start = host[S.TS_NS].to_numpy(np.int64)
        end = start + host[S.DUR_NS].to_numpy(np.int64)
        near = _overlapping(start, end, near_idle)
        order = near[iv.nest_order(start[near], end[near])]
        self.seg_start, self.seg_end, self.seg_owner, parent = _innermost(start[order],
                                                                          end[order])
        names = host[S.NAME]
        if not isinstance(names.dtype, pd.CategoricalDtype):
            names = names.astype("category")
        self.categories = names.cat.categories.astype(str).to_numpy()
        codes = names.cat.codes.to_numpy()[order]
        is_user_cat = np.zeros(len(self.categories), dtype=bool)  # of the names used here
        used = distinct(codes[codes >= 0])
        if len(self.categories):  # and the last, which a missing name (code -1) reads
            used = np.append(used, len(self.categories) - 1)
        is_user_cat[used] = [not _library(c) for c in self.categories[used]]
        is_user = values_in(host[S.KIND], (S.KIND_PYTHON,))[order] & is_user_cat[codes]
        is_op = values_in(host[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION))[order]
        user_above, outer_above = _ancestors(is_user, is_op, parent)
        self.codes = codes
        # per range: (own name, user frame above, outer op above) as name codes, -1 for none
        self.user_code = np.where(user_above >= 0, codes[np.maximum(user_above, 0)], -1)
        self.outer_code = np.where(outer_above >= 0, codes[np.maximum(outer_above, 0)], -1)
        self.n = len(order)
        self.labels: dict[tuple[int, int, int], str] = {}  # each label made once per thread

    def attribute(self, idle: iv.Intervals) -> dict[str, int]:
        """Idle ns by the label of the innermost range covering each idle instant."""
        near = _touching(self.seg_start, self.seg_end, idle)  # the others cover none of it
        covered = iv.covered_each(idle, self.seg_start[near], self.seg_end[near])
        per_owner = np.bincount(self.seg_owner[near], weights=covered, minlength=self.n) \
            if len(self.seg_owner) else np.zeros(0)
        owners = np.flatnonzero(per_owner > 0)
        uniq, inverse, _ = unique_rows([self.codes[owners], self.user_code[owners],
                                        self.outer_code[owners]])
        sums = np.bincount(inverse.ravel(), weights=per_owner[owners], minlength=len(uniq))
        out: dict[str, int] = {}
        for key, ns in zip(map(tuple, uniq.tolist()), sums.tolist()):  # each label once
            label = self.labels.get(key)
            if label is None:
                label = self.labels[key] = _label(self.categories, *key)
            out[label] = out.get(label, 0) + int(ns)
        rest = iv.total(idle) - int(covered.sum())
        if rest > 0:
            out[UNRECORDED] = out.get(UNRECORDED, 0) + rest
        return out


def _touching(seg_start: np.ndarray, seg_end: np.ndarray, idle: iv.Intervals) -> np.ndarray:
    """Indices of the segments (sorted, disjoint) that overlap the idle set: for each idle
    interval, the run of segments ending after its start and starting before its end."""
    first = np.searchsorted(seg_end, idle[0], side="right")
    stop = np.searchsorted(seg_start, idle[1], side="left")
    runs = np.zeros(len(seg_start) + 1, dtype=np.int64)
    np.add.at(runs, first, 1)
    np.add.at(runs, stop, -1)
    return np.flatnonzero(np.cumsum(runs[:-1]) > 0)


def _overlapping(start: np.ndarray, end: np.ndarray, idle: iv.Intervals) -> np.ndarray:
    """Indices of the ranges that overlap the idle set (their ancestors overlap too)."""
    k = np.searchsorted(idle[1], start, side="right")
    ok = k < len(idle[1])
    ok[ok] = idle[0][k[ok]] < end[ok]
    return np.flatnonzero(ok)


def _innermost(start: np.ndarray, end: np.ndarray):
    """Split time into segments each covered by one innermost range (ranges sorted by start,
    longer first; properly nested on one thread): (seg_start, seg_end, owner, parent). An
    instant's owner is the latest range in that order holding it (where ranges nest, the
    innermost; where they cross, the one the stack walk gives it), found for each stretch
    between two range boundaries (:func:`profkit.intervals.innermost`); the parent: the
    range still open where each starts (:func:`profkit.intervals.previous_open`). Times
    before 0 take the walk (:func:`_walk`, whose clock starts there)."""
    if len(start) and start.min() < 0:
        return _walk(start, end)
    cuts = distinct(np.concatenate([start, end]))[:-1]  # each stretch's start
    owner = iv.innermost(iv.nesting(start, end), cuts, cuts + 1)
    stretch_end = np.append(cuts[1:], end.max()) if len(cuts) else cuts
    held = owner >= 0
    return cuts[held], stretch_end[held], owner[held], iv.previous_open(start, end)


def _walk(start: np.ndarray, end: np.ndarray):
    """:func:`_innermost` by a plain stack walk (one pass, locals and no max()): what the
    segments were made by before, and what decides for times before 0."""
    n = len(start)
    parent = [-1] * n
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_o: list[int] = []
    stack: list[int] = []
    s_list, e_list = start.tolist(), end.tolist()
    cursor = 0

    def close(top: int) -> None:  # a range ends: its tail after the cursor is its own
        nonlocal cursor
        e = e_list[top]
        if e > cursor:
            s = s_list[top]
            seg_s.append(s if s > cursor else cursor)
            seg_e.append(e)
            seg_o.append(top)
            cursor = e

    for i in range(n):
        t = s_list[i]
        while stack and e_list[stack[-1]] <= t:
            close(stack.pop())
        if stack:
            if t > cursor:  # the enclosing range owns the time up to this child
                seg_s.append(cursor)
                seg_e.append(t)
                seg_o.append(stack[-1])
            parent[i] = stack[-1]
        if t > cursor:
            cursor = t
        stack.append(i)
    while stack:
        close(stack.pop())
    return (np.array(seg_s, np.int64), np.array(seg_e, np.int64),
            np.array(seg_o, np.int64), np.array(parent, np.int64))


def _ancestors(is_user: np.ndarray, is_op: np.ndarray, parent: np.ndarray):
    """Per range: the nearest user-code Python frame above it and the outermost CPU op or
    annotation above it (-1 when none), by pointer jumping up the parents (a round per
    doubling of the depth, for every range at once)."""
    n = len(parent)
    # nearest: each candidate an ancestor with nothing marked between; jump past unmarked
    user_above = parent.copy()
    todo = np.flatnonzero(user_above >= 0)
    while len(todo):
        todo = todo[~is_user[user_above[todo]]]
        user_above[todo] = user_above[user_above[todo]]
        todo = todo[user_above[todo] >= 0]
    # outermost: of the path from each range up to (not into) ``up``, its outermost op
    top = np.where(is_op, np.arange(n), -1)
    up = parent.copy()
    todo = np.flatnonzero(up >= 0)
    while len(todo):
        higher = top[up[todo]]
        top[todo] = np.where(higher >= 0, higher, top[todo])
        up[todo] = up[up[todo]]
        todo = todo[up[todo] >= 0]
    outer_above = np.where(parent >= 0, top[np.maximum(parent, 0)], -1)
    return user_above, outer_above


def _label(names: np.ndarray, own: int, user: int, outer: int) -> str:
    """The innermost range's name, prefixed by the nearest user-code Python frame above it
    (with stacks) or else the outermost op above it (name codes; -1: none)."""
    inner = names[own]
    if user >= 0:
        return f"{_short(names[user])} -> {_short(inner)}"
    if outer >= 0 and names[outer] != inner:
        return f"{_short(names[outer])} -> {_short(inner)}"
    return _short(inner)


@functools.lru_cache(maxsize=65536)
def _library(name: str) -> bool:
    return _LIBRARY.search(name) is not None


def _short(name: str, width: int = 80) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
