"""Compilation inside the profiled steps: the host time torch.compile spent compiling (Dynamo,
AOTAutograd, Inductor, Triton autotuning; the names in :mod:`profkit.classify.compilation`),
per step window, split by phase.

A step that compiles is not the steady state: its seconds of host work are a one-off (or a
recompile that repeats with every new shape), so :func:`~.steps.choose_steps` leaves it out of
the verdict and the findings say what it cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import intervals as iv
from profkit import schema as S
from profkit.classify.compilation import COMPILE_PHASES, FRAME_COMPILE_RE, compile_phase
from profkit.columns import category_mask, values_in
from profkit.model import RankData

COMPILE_NS = "compile_ns"
FRAME_COMPILES = "frame_compiles"
PHASE_COLUMNS = tuple(f"{p}_ns" for p in COMPILE_PHASES)
COMPILE_COLUMNS = ("rank", S.STEP, "step_ns", COMPILE_NS, FRAME_COMPILES, *PHASE_COLUMNS)
RANGE_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION)


def compile_ranges(events: pd.DataFrame) -> pd.DataFrame:
    """The host ranges that are compilation, with their ``phase``; the vocabulary runs once
    per unique name."""
    host = values_in(events[S.KIND], RANGE_KINDS)
    names = events[S.NAME]
    if isinstance(names.dtype, pd.CategoricalDtype):  # the names host rows use, once each
        codes = names.array.codes[host]
        used = np.bincount(codes[codes >= 0], minlength=len(names.dtype.categories))
        cats = names.dtype.categories[np.flatnonzero(used)]  # np.unique's codes, by a count
    else:
        cats = pd.Index(names[host].unique())
    phases = pd.Series(compile_phase(np.asarray(cats, dtype=object)), index=cats)
    phases = phases[phases != ""]
    rows = events[host & values_in(names, phases.index)]
    return rows.assign(phase=rows[S.NAME].map(phases).astype(str).to_numpy())


def compile_spans(ranges: pd.DataFrame) -> iv.Intervals:
    """The union of the compile ranges (every thread: a backward compile runs on autograd's)."""
    start = ranges[S.TS_NS].to_numpy(np.int64)
    return iv.union(start, start + ranges[S.DUR_NS].to_numpy(np.int64))


def phase_spans(ranges: pd.DataFrame) -> dict[str, iv.Intervals]:
    """Compile time by phase, disjoint: an instant inside nested ranges goes to the innermost
    phase (autotune inside inductor inside AOTAutograd inside Dynamo)."""
    out, taken = {}, iv.union([], [])
    for phase in COMPILE_PHASES:
        mine = compile_spans(ranges[(ranges["phase"] == phase).to_numpy()])
        out[phase] = iv.subtract(mine, taken)
        taken = iv.union_of(taken, mine)
    return out


def frame_compile_starts(ranges: pd.DataFrame) -> np.ndarray:
    """Start (ns) of each Dynamo frame compile: the outermost frame-compile ranges, so that a
    compile recorded under two names (``entire_frame_compile`` around
    ``_compile.compile_inner``) counts once."""
    rows = ranges[category_mask(ranges[S.NAME], FRAME_COMPILE_RE)] if len(ranges) else ranges
    if rows.empty:
        return np.empty(0, np.int64)
    rows = rows.sort_values([S.TS_NS, S.DUR_NS], ascending=[True, False])
    ts = rows[S.TS_NS].to_numpy(np.int64)
    reach = np.maximum.accumulate(ts + rows[S.DUR_NS].to_numpy(np.int64))
    outer = np.ones(len(ts), bool)
    outer[1:] = ts[1:] >= reach[:-1]
    return ts[outer]


def rank_compile_ranges(data: RankData) -> pd.DataFrame:
    """:func:`compile_ranges` of the rank's events, found once per rank (the breakdown's
    windows and its compilation table read them)."""
    return data.derived(_events_compile_ranges)


def _events_compile_ranges(data: RankData) -> pd.DataFrame:
    return compile_ranges(data.events)


def window_compilation(ranges: pd.DataFrame, starts: np.ndarray, ends: np.ndarray,
                       numbers: np.ndarray, rank: int) -> pd.DataFrame:
    """One row per window with compilation in it (:data:`COMPILE_COLUMNS`): the compile time
    (ns), the Dynamo frame compiles that started in it, and the compile time by phase
    (``ranges``: :func:`compile_ranges`)."""
    if ranges.empty or not len(starts):
        return pd.DataFrame(columns=list(COMPILE_COLUMNS))
    table = pd.DataFrame({"rank": rank, S.STEP: numbers, "step_ns": ends - starts})
    table[COMPILE_NS] = iv.covered_each(compile_spans(ranges), starts, ends)
    frames = frame_compile_starts(ranges)
    table[FRAME_COMPILES] = [int(((frames >= s) & (frames < e)).sum())
                             for s, e in zip(starts, ends)]
    for phase, spans in phase_spans(ranges).items():
        table[f"{phase}_ns"] = iv.covered_each(spans, starts, ends)
    table = table.groupby(["rank", S.STEP], as_index=False, sort=False).sum()
    return table[table[COMPILE_NS] > 0].reset_index(drop=True)[list(COMPILE_COLUMNS)]
