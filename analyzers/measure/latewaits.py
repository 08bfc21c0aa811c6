"""The other ranks' waits for each collective's last rank (:mod:`stragglers`' evidence) on
numpy columns: what the others lose to each late rank, the collective they wait in most, and
the late rank costing them most in each step. Sums are those pandas' groupby gave, to the bit
(:meth:`npgroups.Groups.fsum`): the reduce runs these on the main process's critical path.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.measure.comms import EXPOSED_WAIT_NS, KEY, LAST_RANK, RANK, WAIT_NS
from profkit.analyzers.measure.npgroups import Groups, runs, sorted_codes
from profkit.analyzers.thresholds import Thresholds

from profkit import schema as S
from profkit.columns import unique_rows

OTHERS_STEP_NS = "others_step_ns"  # as stragglers names it


def coll_rows(coll: pd.DataFrame, waits: pd.DataFrame) -> np.ndarray:
    """Each wait's collective's row in ``coll`` (-1 where none): the inner merge on KEY."""
    return pd.Index(coll[KEY]).get_indexer(waits[KEY])


def others_wait(w: pd.DataFrame, cap: dict[int, float]) -> tuple[pd.Series, pd.Series]:
    """Per late rank: the other ranks' mean wait for it, summed over the collectives inside
    profiled steps where it arrived last (ns; raw and exposed; ``w``: :func:`stragglers._late_waits`).
    A waiting rank's wait for it counts at most ``cap[rank]`` (its profiled steps' time):
    waits of two groups on two streams may overlap."""
    share = float(w["share"].iloc[0]) if len(w) else 1.0
    last, rank = w[LAST_RANK].to_numpy(np.int64), w[RANK].to_numpy(np.int64)
    pairs_of, code, _ = unique_rows([last, rank])  # (late rank, waiting rank), sorted
    pair_last, pair_rank = pairs_of[:, 0], pairs_of[:, 1]
    pairs = Groups(code, len(pair_last))
    lasts, of_pair = np.unique(pair_last, return_inverse=True)
    by_last = Groups(of_pair.reshape(-1), len(lasts))
    limit = np.array([cap.get(int(r), np.inf) for r in pair_rank], dtype=np.float64)
    out = []
    for col in (WAIT_NS, EXPOSED_WAIT_NS):  # int sums per (late, waiting) rank, capped
        capped = np.minimum(pairs.sum(w[col].to_numpy(np.int64)).astype(np.float64),
                            np.nan_to_num(limit, nan=np.inf))
        out.append(pd.Series(by_last.fsum(capped * share), index=pd.Index(lasts, name=LAST_RANK)))
    return out[0], out[1]


def wait_collectives(table: pd.DataFrame, late: pd.DataFrame,
                      labels: dict | None = None) -> tuple[list, list]:
    """Per rank, the collective (kind, size, process group) the others wait in most for it,
    and that collective's share of their exposed wait for it ("" and NaN when none; ``late``:
    :func:`stragglers._late_waits`)."""
    cost = late[EXPOSED_WAIT_NS].to_numpy() * late["share"].to_numpy()
    last = late[LAST_RANK].to_numpy(np.int64)
    # (kind, size, group) numbered in sorted order, a missing size last: groupby's order
    keys = [sorted_codes(late[c].to_numpy()) for c in (S.COLL_NAME, S.MSG_BYTES, "pg")]
    order = np.argsort(last, kind="stable")  # by rank, each rank's rows in the table's order
    last_o = last[order]
    names, shares = [], []
    for rank in table[RANK]:
        lo, hi = np.searchsorted(last_o, rank), np.searchsorted(last_o, rank, side="right")
        mine = order[lo:hi]
        total = float(np.sum(cost[mine]))
        if lo == hi or total <= 0:
            names.append("")
            shares.append(np.nan)
            continue
        key = np.stack([k[0][mine] for k in keys], axis=1)
        found, code = np.unique(key, axis=0, return_inverse=True)
        sums = Groups(code.reshape(-1), len(found)).fsum(cost[mine])
        best = int(np.argmax(sums))
        kind, nbytes, pg = (k[1][found[best, i]] for i, k in enumerate(keys))
        names.append(_collective_name(kind, nbytes, pg, labels or {}))
        shares.append(float(sums[best]) / total)
    return names, shares


def _collective_name(kind, nbytes, pg, labels: dict) -> str:
    size = f" of {U.size(nbytes)}" if np.isfinite(nbytes) and nbytes > 0 else ""
    known = pg not in (None, "") and pg == pg
    group = (f" in {labels[str(pg)]}" if known and str(pg) in labels
             else f" in process group {pg}" if known else "")
    return f"{kind}{size}{group}"


def costliest_by_step(w: pd.DataFrame, table: pd.DataFrame, th: Thresholds) -> dict[int, int]:
    """{step: the rank whose lateness cost the others most in it}, for the steps where that
    cost reaches ``straggler_min_wait_frac`` of the others' step (``w``: :func:`stragglers._late_waits`)."""
    if w.empty or table.empty:
        return {}
    cost = w[EXPOSED_WAIT_NS].to_numpy() * w["share"].to_numpy()
    pairs_of, code, _ = unique_rows([w[S.STEP].to_numpy(np.int64), w[LAST_RANK].to_numpy(np.int64)])
    steps, ranks = pairs_of[:, 0], pairs_of[:, 1]
    per_pair = Groups(code, len(steps)).fsum(cost)  # (step, late rank), as groupby sums
    step_ns = float(np.nanmedian(table[OTHERS_STEP_NS])) if table[OTHERS_STEP_NS].notna().any() \
        else np.nan
    out = {}
    for lo, hi in runs(steps):
        at = lo + int(np.argmax(per_pair[lo:hi]))  # the first of equal costs, as max() keeps
        if np.isfinite(step_ns) and per_pair[at] >= th.straggler_min_wait_frac * step_ns:
            out[int(steps[at])] = int(ranks[at])
    return out
