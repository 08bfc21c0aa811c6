"""Which waits a process group explains, for the straggler judgement.

A rank waits inside a collective for the peers of that collective's group. On a DeviceMesh a
host-bound rank keeps its tensor-parallel peer waiting in one group and its data-parallel
peer in another: each wait is explained by its group, and the two together may exceed a
step without any clock being wrong. What no group explains is a rank waiting, within one
group, longer than its own steps last: one group's collectives run in issue order on one
stream, so their waits cannot add up past the step unless the ranks' clocks disagree (or
the matching paired the wrong calls). Only that is read as misaligned clocks.

Point-to-point transfers (send / recv, a pipeline's stages) are no collective: a stage waits
in its recv for the stage before it by design (the pipeline bubble), and its "latest start"
says nothing of a straggler or of clocks. They are left out of the straggler judgement, as
are the collectives of groups whose dimension is pipeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.comms import (
    EXPOSED_WAIT_NS,
    KEY,
    LAST_RANK,
    N_COLLECTIVES,
    N_LAST,
    PG,
    RANK,
)
from profkit.analyzers.measure.dimensions import P2P

from profkit import schema as S

PIPELINE = "pipeline"
MEDIAN_STEP_NS = "median_step_ns"  # as stragglers.rank_step_stats names it
WAIT_FRAC = "wait_frac"


def without_pipeline(coll: pd.DataFrame, waits: pd.DataFrame, per_rank: pd.DataFrame,
                     layout: dict | None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The matched collectives, their waits and the per-rank counts without point-to-point
    transfers and without the collectives of pipeline groups (``layout``: the layout's facts,
    with ``dimensions`` {group: dimension}). Unchanged when there are none."""
    dims = (layout or {}).get("dimensions") or {}
    pipeline = {pg for pg, d in dims.items() if d == PIPELINE}
    drop = (coll[S.COLL_NAME].astype(str) == P2P) | coll[PG].astype(str).isin(pipeline)
    if not drop.any():
        return coll, waits, per_rank
    coll = coll[~drop.to_numpy()].reset_index(drop=True)
    waits = waits[waits[KEY].isin(coll[KEY])].reset_index(drop=True)
    counts = waits.groupby(RANK).size()
    last = coll[LAST_RANK].value_counts()
    per_rank = per_rank[per_rank[RANK].isin(counts.index)].copy()
    per_rank[N_COLLECTIVES] = per_rank[RANK].map(counts).astype(np.int64)
    per_rank[N_LAST] = per_rank[RANK].map(last).fillna(0).astype(np.int64)
    return coll, waits, per_rank.reset_index(drop=True)


def unexplained_waits(late: pd.DataFrame, step_stats: dict[int, dict[str, float]],
                      n_steps: int, labels: dict | None = None) -> pd.DataFrame:
    """Rows (rank, group, wait_frac, group label) where a rank's exposed wait in one group
    per step exceeds its own median step: waits no group explains (module doc). ``late``:
    the waits for each collective's last rank inside steps (stragglers._late_waits)."""
    columns = [RANK, PG, WAIT_FRAC, "group"]
    if late.empty or not n_steps:
        return pd.DataFrame(columns=columns)
    per = late.groupby([RANK, PG], sort=True)[EXPOSED_WAIT_NS].sum() / n_steps
    rows = []
    for (rank, pg), ns in per.items():
        step_ns = (step_stats.get(int(rank)) or {}).get(MEDIAN_STEP_NS, np.nan)
        if np.isfinite(step_ns) and step_ns > 0 and ns > step_ns:
            rows.append({RANK: int(rank), PG: str(pg), WAIT_FRAC: float(ns / step_ns),
                         "group": (labels or {}).get(str(pg), f"process group {pg}")})
    return pd.DataFrame(rows, columns=columns)
