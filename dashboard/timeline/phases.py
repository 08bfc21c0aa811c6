"""The inference phases the timeline shades: the analysis' forwards (``inference_forwards``,
analyzers/measure/inference.py: one row per forward with its window, which tile the step),
merged into one window per run of consecutive forwards of one phase in a step: HF
``generate``'s step is two windows (prefill, then its 15 decode forwards), not 16; an
engine's steps alternating prefill and decode keep each change of phase. Times in ms after
the run's origin, as every lane of the timeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.dashboard.figures import phase_bands as PB

PHASE_COLUMNS = ["rank", "step", "phase", "start_ms", "end_ms", "forwards"]


def phase_windows(forwards: pd.DataFrame, origin_ns: int) -> pd.DataFrame:
    """One row per run of consecutive forwards of one phase within a rank's step whose
    windows touch (each starts where the one before ends, or earlier): PHASE_COLUMNS."""
    if forwards is None or forwards.empty:
        return pd.DataFrame(columns=PHASE_COLUMNS)
    fw = forwards.sort_values(["rank", "step", "window_start_ns"], kind="stable")
    start = fw["window_start_ns"].to_numpy(np.int64)
    end = fw["window_end_ns"].to_numpy(np.int64)
    # the latest end so far in the rank's step: a window inside an earlier one joins it
    reach = pd.Series(end).groupby([fw["rank"].to_numpy(), fw["step"].to_numpy()]).cummax() \
        .to_numpy()
    same = np.r_[False, np.logical_and.reduce(
        [(col[1:] == col[:-1]) for col in (fw[c].to_numpy() for c in ("rank", "step", "phase"))])]
    touches = np.r_[False, start[1:] <= reach[:-1]]
    run = np.cumsum(~(same & touches))
    merged = pd.DataFrame({"run": run, "rank": fw["rank"].to_numpy(), "step": fw["step"].to_numpy(),
                           "phase": fw["phase"].astype(str).to_numpy(), "start": start,
                           "end": end}).groupby("run", sort=True).agg(
        rank=("rank", "first"), step=("step", "first"), phase=("phase", "first"),
        start=("start", "min"), end=("end", "max"), forwards=("start", "size"))
    return pd.DataFrame({
        "rank": merged["rank"].astype(int).to_numpy(), "step": merged["step"].to_numpy(),
        "phase": merged["phase"].to_numpy(),
        "start_ms": (merged["start"].to_numpy() - origin_ns) / 1e6,
        "end_ms": (merged["end"].to_numpy() - origin_ns) / 1e6,
        "forwards": merged["forwards"].astype(int).to_numpy()}, columns=PHASE_COLUMNS)


def phases_in_window(windows: pd.DataFrame, ranks, x0_ms: float, x1_ms: float) -> pd.DataFrame:
    """The phase windows of ``ranks`` overlapping [x0, x1] ms."""
    if windows.empty:
        return windows
    keep = windows["rank"].isin(list(ranks)) & (windows["end_ms"] >= x0_ms) \
        & (windows["start_ms"] <= x1_ms)
    return windows[keep].reset_index(drop=True)


def view_phases(analysis, origin_ns: int, view) -> pd.DataFrame:
    """The phase windows the timeline ``view`` shows (none for a run without phases)."""
    windows = phase_windows(analysis.table("inference_forwards"), origin_ns)
    return phases_in_window(windows, view.ranks, view.x0_ms, view.x1_ms)


def legend(analysis) -> dict[str, str]:
    """The timeline legend's entries of the phases the run has (none without)."""
    forwards = analysis.table("inference_forwards")
    return PB.legend(set(forwards["phase"]) if "phase" in forwards else set())
