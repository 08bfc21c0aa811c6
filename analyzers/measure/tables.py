"""Small helpers the kernel-level analyzers share."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.columns import category_mask
from profkit.model import RankData, step_times_ns
from profkit.run.rankfiles import rank_ranges  # noqa: F401  (one rank-list format for core and analyzers)

RANK = "rank"


def name_mask(names: pd.Series, regex: re.Pattern) -> np.ndarray:
    """Boolean mask of rows whose name matches, evaluated once per distinct name (for a
    categorical column, once per category while its categories live)."""
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    return category_mask(cat, regex)


def window_ns(rd: RankData) -> int:
    """Profiled time of a rank: its summed step times, else first GPU start to last GPU end."""
    if len(rd.steps):
        return int(step_times_ns(rd.steps).sum())
    gpu = rd.gpu_events
    if gpu.empty:
        return 0
    return int((gpu[S.TS_NS] + gpu[S.DUR_NS]).max() - gpu[S.TS_NS].min())


def in_steps(frame: pd.DataFrame, rd: RankData) -> pd.DataFrame:
    """Rows inside profiled steps when the rank has steps, else rows starting between the
    first GPU start and the last GPU end (start-up calls outside it are not step cost)."""
    return frame[in_steps_mask(frame, rd)]


def in_steps_mask(frame: pd.DataFrame, rd: RankData) -> np.ndarray:
    """:func:`in_steps`' rows, as a mask."""
    if len(rd.steps):
        return (frame[S.STEP] >= 0).to_numpy()
    gpu = rd.gpu_events
    lo, hi = gpu[S.TS_NS].min(), (gpu[S.TS_NS] + gpu[S.DUR_NS]).max()
    return ((frame[S.TS_NS] >= lo) & (frame[S.TS_NS] <= hi)).to_numpy()


def kernels_of(rd: RankData) -> pd.DataFrame:
    return rd.of_kinds((S.KIND_KERNEL,))


def empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object" if c in (S.NAME, S.CLASS, S.SUBCLASS,
                                                               "sequence") else "float64")
                         for c in columns})


def plain(v):
    return v.item() if isinstance(v, np.generic) else v
