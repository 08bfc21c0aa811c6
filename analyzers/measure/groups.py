"""Slow process groups: the same collective running slower in one group than in its peers.

At scale a job runs one collective in many identical groups at once (tensor- or
pipeline-parallel groups, one per node, data-parallel replicas). A degraded link (an NVLink
down to fewer lanes, a flapping NIC, a bad switch port) slows every collective of the groups
that use it, and only those. Per matched collective the latency (its shortest duration over
the group: the rank that arrived last waited least, so this is transfer, not waiting) is
compared between groups doing the same work: same collective, same bytes, same group size.
A group whose median latency is at least ``slow_group_factor`` times the median over its
peer groups, on at least ``slow_group_min_collectives`` collectives, is flagged.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import schema as S
from profkit.columns import aggregate, unique_rows

GROUP_COLUMNS = ("pg", S.COLL_NAME, S.MSG_BYTES, S.GROUP_SIZE, "collectives",
                 "median_latency_ns", "peer_groups", "peer_median_latency_ns", "slowdown",
                 "median_busbw_gbps", "ranks", "slow", "group")


def find_slow_groups(comms: Result, th: Thresholds = DEFAULT, layout: dict | None = None) -> Result:
    """Table ``group_latency``: one row per (process group, collective, bytes, group size)
    that has peer groups, with its slowdown against them; a finding per slow group.
    ``layout``: the layout's facts; its ``labels`` name the groups ("group" column)."""
    coll, waits = comms.tables.get("collectives"), comms.tables.get("collective_waits")
    if coll is None or coll.empty:
        return Result(tables={"group_latency": _empty()})
    work = [S.COLL_NAME, S.MSG_BYTES, S.GROUP_SIZE]
    if not _any_peers(coll, work):  # (the common case: its groupbys cost ~3 ms)
        return Result(tables={"group_latency": _empty()})
    per = aggregate(coll.groupby(["pg", *work], dropna=False), dict(
        collectives=("latency_ns", "size"), median_latency_ns=("latency_ns", "median"),
        median_busbw_gbps=("busbw_gbps", "median"))).reset_index()
    per["peer_groups"] = per.groupby(work, dropna=False)["pg"].transform("size") - 1
    per = per[per["peer_groups"] >= 1].reset_index(drop=True)
    if per.empty:
        return Result(tables={"group_latency": _empty()})
    per["peer_median_latency_ns"] = _peer_medians(per, work)
    per["slowdown"] = per["median_latency_ns"] / per["peer_median_latency_ns"].where(
        per["peer_median_latency_ns"] > 0)
    per["ranks"] = per["pg"].map(_members(coll, waits)).fillna("")
    labels = (layout or {}).get("labels") or {}
    per["group"] = [labels.get(str(pg), "") for pg in per["pg"]]
    per["slow"] = ((per["slowdown"] >= th.slow_group_factor)
                   & (per["collectives"] >= th.slow_group_min_collectives)).to_numpy(bool)
    per = per.sort_values(["slowdown", "pg"], ascending=[False, True], kind="stable")
    table = per[list(GROUP_COLUMNS)].reset_index(drop=True)
    return Result(tables={"group_latency": table}, facts={"topic": "groups", "thresholds": th})


def _any_peers(coll: pd.DataFrame, work: list[str]) -> bool:
    """Whether two process groups ran the same work (a missing key is a key, as dropna=False
    groups it)."""
    codes = [pd.factorize(coll[c].to_numpy(), use_na_sentinel=False)[0] for c in ["pg", *work]]
    pairs, _, _ = unique_rows(codes)  # the distinct (group, work) rows
    _, _, groups_per_work = unique_rows([pairs[:, j] for j in range(1, pairs.shape[1])])
    return bool((groups_per_work >= 2).any())


def _peer_medians(per: pd.DataFrame, work: list[str]) -> np.ndarray:
    """For each row, the median of the other groups' median latencies for the same work."""
    out = np.full(len(per), np.nan)
    for _, idx in per.groupby(work, dropna=False).indices.items():
        values = per["median_latency_ns"].to_numpy()[idx]
        for j, i in enumerate(idx):
            out[i] = np.median(np.delete(values, j))
    return out


def _members(coll: pd.DataFrame, waits: pd.DataFrame | None) -> dict[str, str]:
    """Each process group's ranks, as a compact range string ("8-15" or "0,2,4")."""
    if waits is None or waits.empty:
        return {}
    ranks = waits[["key", "rank"]].merge(coll[["key", "pg"]], on="key")
    return {pg: rank_ranges(g["rank"].tolist()) for pg, g in ranks.groupby("pg")}


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("pg", S.COLL_NAME, "ranks", "group")
                                      else "float64") for c in GROUP_COLUMNS})
