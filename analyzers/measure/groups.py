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
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import schema as S

GROUP_COLUMNS = ("pg", S.COLL_NAME, S.MSG_BYTES, S.GROUP_SIZE, "collectives",
                 "median_latency_ns", "peer_groups", "peer_median_latency_ns", "slowdown",
                 "median_busbw_gbps", "ranks", "slow")


def find_slow_groups(comms: Result, th: Thresholds = DEFAULT) -> Result:
    """Table ``group_latency``: one row per (process group, collective, bytes, group size)
    that has peer groups, with its slowdown against them; a finding per slow group."""
    coll, waits = comms.tables.get("collectives"), comms.tables.get("collective_waits")
    if coll is None or coll.empty:
        return Result(tables={"group_latency": _empty()})
    work = [S.COLL_NAME, S.MSG_BYTES, S.GROUP_SIZE]
    per = (coll.groupby(["pg", *work], dropna=False)
           .agg(collectives=("latency_ns", "size"), median_latency_ns=("latency_ns", "median"),
                median_busbw_gbps=("busbw_gbps", "median")).reset_index())
    per["peer_groups"] = per.groupby(work, dropna=False)["pg"].transform("size") - 1
    per = per[per["peer_groups"] >= 1].reset_index(drop=True)
    if per.empty:
        return Result(tables={"group_latency": _empty()})
    per["peer_median_latency_ns"] = _peer_medians(per, work)
    per["slowdown"] = per["median_latency_ns"] / per["peer_median_latency_ns"].where(
        per["peer_median_latency_ns"] > 0)
    per["ranks"] = per["pg"].map(_members(coll, waits)).fillna("")
    per["slow"] = ((per["slowdown"] >= th.slow_group_factor)
                   & (per["collectives"] >= th.slow_group_min_collectives)).to_numpy(bool)
    per = per.sort_values(["slowdown", "pg"], ascending=[False, True], kind="stable")
    table = per[list(GROUP_COLUMNS)].reset_index(drop=True)
    return Result(tables={"group_latency": table}, findings=_findings(table))


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


def _findings(table: pd.DataFrame) -> list[Finding]:
    out = []
    for pg, rows in table[table["slow"]].groupby("pg", sort=False):
        worst = rows.iloc[0]
        out.append(Finding(
            category="communication", severity="warning",
            message=(f"process group {pg} (ranks {worst['ranks']}) runs {worst[S.COLL_NAME]} of "
                     f"{_size(worst[S.MSG_BYTES])} {worst['slowdown']:.1f}x slower than its "
                     f"{int(worst['peer_groups'])} peer group(s) doing the same work (median "
                     f"{worst['median_latency_ns'] / 1e3:.0f} us vs "
                     f"{worst['peer_median_latency_ns'] / 1e3:.0f} us): a slow link among its ranks"),
            evidence={"pg": str(pg), "ranks": worst["ranks"],
                      "slowdown": round(float(worst["slowdown"]), 2),
                      "collectives": int(rows["collectives"].sum()),
                      "median_latency_us": round(float(worst["median_latency_ns"]) / 1e3, 1),
                      "peer_median_latency_us":
                          round(float(worst["peer_median_latency_ns"]) / 1e3, 1)},
            recommendation=("Check the links of these ranks: NVLink state and lane count "
                            "(nvidia-smi nvlink -s), NIC and port errors (ibstat, perfquery), "
                            "the transport NCCL chose in its log (NCCL_DEBUG=INFO), and run "
                            "nccl-tests on this group alone; move the job off the node if "
                            "the link is degraded.")))
    return out


def _size(nbytes: float) -> str:
    return "unknown size" if not np.isfinite(nbytes) or nbytes < 0 else f"{nbytes / 2**20:.1f} MiB"


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("pg", S.COLL_NAME, "ranks")
                                      else "float64") for c in GROUP_COLUMNS})
