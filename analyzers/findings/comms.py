"""Findings about communication: collectives that could not be matched across ranks,
stragglers (and ranks whose waits cannot be trusted), slow links and slow process groups.
Each reads a measurement's :class:`~profkit.analyzers.result.Result` (tables and facts) of
:mod:`profkit.analyzers.measure.comms`, ``stragglers``, ``links`` or ``groups``."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.measure.comms import (
    KEY_MODE,
    MATCHING,
    N_RANKS,
    N_ROWS,
    N_UNMATCHED_KEYS,
    N_UNMATCHED_ROWS,
)
from profkit.analyzers.measure.links import LARGE_BYTES
from profkit.analyzers.measure.stragglers import (
    COMPUTE_NS_PER_STEP,
    EVIDENCE,
    EXPECTED_LAST,
    N_COLLECTIVES,
    N_LAST,
    OTHERS_COMPUTE_NS_PER_STEP,
    OTHERS_EXPOSED_WAIT_NS_PER_STEP,
    OTHERS_STEP_NS,
    P_VALUE,
    RANK,
    STRAGGLER,
    STRAGGLER_COLUMNS,
    WAIT_COLLECTIVE,
    WAIT_FRAC,
    json_scalar,
    ms_text,
)
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

from profkit import schema as S
from profkit.textout import plural


def collective_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """Rows dropped from matching (:func:`profkit.analyzers.measure.comms.match_collectives`)."""
    return _matching_findings(result.tables[MATCHING])


def straggler_findings(result: Result, th: Thresholds) -> list[Finding]:
    """One finding per flagged straggler, or one saying that waits longer than a step make
    any straggler verdict untrustworthy."""
    misaligned, table = result.facts["misaligned"], result.facts["table"]
    if len(misaligned):
        return [_misaligned(misaligned)]
    change = _change_note(result.facts.get("costliest_by_step") or {})
    return [_finding(row, th, change) for row in table[table[STRAGGLER]].to_dict("records")]


def _change_note(by_step: dict[int, int]) -> str:
    """'; the straggler changed during the run: rank 2 in steps 3-4, rank 3 in steps 5-8'
    when different ranks cost the others most in different steps, else ''."""
    if len(set(by_step.values())) < 2:
        return ""
    runs: list[list] = []
    for step in sorted(by_step):
        rank = by_step[step]
        if runs and runs[-1][0] == rank and runs[-1][2] == step - 1:
            runs[-1][2] = step
        else:
            runs.append([rank, step, step])
    parts = [f"rank {r} in step{'s' if a != b else ''} {a}{f'-{b}' if a != b else ''}"
             for r, a, b in runs]
    return f"; the straggler changed during the run: {', '.join(parts)}"


def group_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """One finding per process group slower than its peers doing the same work."""
    return _group_findings(result.tables["group_latency"])


def link_findings(result: Result, th: Thresholds) -> list[Finding]:
    """A warning when large collectives reach a low share of the link's bandwidth."""
    facts = result.facts
    large, link, model = facts["large"], facts["link_gbps"], facts["device"]
    findings = []
    if len(large) and float(large["link_util"].median()) < th.low_link_util_frac:
        util = float(large["link_util"].median())
        findings.append(Finding(
            category="communication", severity="warning",
            message=(f"large collectives (>= {U.size(LARGE_BYTES)}) reach {util:.0%} of the "
                     f"{model} link's {link:.0f} GB/s (median bus bandwidth "
                     f"{float(large['busbw_gbps'].median()):.0f} GB/s)"),
            evidence={"collectives": int(len(large)), "median_link_util": round(util, 3),
                      "link_gbps": link, "device": model},
            recommendation=("Check the NCCL topology and transport in the NCCL log (P2P/NVLink "
                            "vs SHM/PCIe), NCCL_P2P_DISABLE and similar knobs, and GPU placement; "
                            "small, frequent collectives can be bucketed into larger ones.")))
    return findings


def _matching_findings(matching: pd.DataFrame) -> list[Finding]:
    """An info finding when rows were dropped from a group that two or more ranks share (a
    single-rank trace has nothing to match against and is no anomaly)."""
    matching = matching[matching[N_RANKS] >= 2]
    dropped = int(matching[N_UNMATCHED_ROWS].sum()) if len(matching) else 0
    if dropped == 0:
        return []
    total = int(matching[N_ROWS].sum())
    return [Finding(
        category="collectives", severity="info",
        message=f"{dropped} of {total} collective rows could not be matched across ranks "
                "and were left out of waits and bandwidth",
        recommendation="Profile the same steps on every rank (one profiler schedule), and "
                       "use a PyTorch whose traces carry 'Seq' or 'Comms Id' for exact matching.",
        evidence={"unmatched_rows": dropped, "rows": total,
                  "unmatched_keys": int(matching[N_UNMATCHED_KEYS].sum()),
                  "key_modes": sorted(set(matching[KEY_MODE].astype(str)))},
    )]


def _group_findings(table: pd.DataFrame) -> list[Finding]:
    out = []
    for pg, rows in table[table["slow"]].groupby("pg", sort=False):
        worst = rows.iloc[0]
        name = worst.get("group") or f"process group {pg} (ranks {worst['ranks']})"
        out.append(Finding(
            category="communication", severity="warning",
            message=(f"{name} runs {worst[S.COLL_NAME]} of "
                     f"{_size(worst[S.MSG_BYTES])} {worst['slowdown']:.1f}x slower than its "
                     f"{plural(int(worst['peer_groups']), 'peer group')} doing the same work (median "
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
    return "unknown size" if not np.isfinite(nbytes) or nbytes < 0 else U.size(nbytes)


def _misaligned(rows: pd.DataFrame) -> Finding:
    worst = rows.sort_values(WAIT_FRAC).iloc[-1]
    group = f" in {worst['group']}" if worst.get("group") else ""
    return Finding(
        category="collectives", severity="warning", rank=None,
        message=(f"collective waits exceed the step time ({worst[WAIT_FRAC]:.0%} of a step for "
                 f"rank {int(worst[RANK])}{group}): the ranks' clocks are not aligned or their "
                 "collectives do not match up, so no straggler verdict is given"),
        evidence={"wait_frac": round(float(worst[WAIT_FRAC]), 3), "rank": int(worst[RANK])},
        recommendation=("Capture with profkit.profile (it measures clock offsets between "
                        "ranks), profile the same steps on every rank, and check that all "
                        "ranks' traces come from the same run."))


def _finding(row: dict, th: Thresholds, change: str = "") -> Finding:
    rank = int(row[RANK])
    severity = "critical" if row[WAIT_FRAC] >= th.straggler_critical_wait_frac else "warning"
    evidence = {k: json_scalar(row[k]) for k in STRAGGLER_COLUMNS if k not in (STRAGGLER, EVIDENCE)}
    weak = row[P_VALUE] >= th.straggler_max_p_value
    where = f", mostly in {row[WAIT_COLLECTIVE]}" if row.get(WAIT_COLLECTIVE) else ""
    return Finding(
        category="straggler", severity=severity, rank=rank, evidence=evidence,
        message=(f"Rank {rank} is a straggler: the other ranks lose "
                 f"{ms_text(row[OTHERS_EXPOSED_WAIT_NS_PER_STEP])} per step "
                 f"({pct(row[WAIT_FRAC])} of their {ms_text(row[OTHERS_STEP_NS])} step) waiting "
                 f"for it{where}; it was last at {row[N_LAST]} of {row[N_COLLECTIVES]} "
                 f"collectives (~{row[EXPECTED_LAST]:.0f} by chance, p={row[P_VALUE]:.2g}"
                 f"{': weak evidence, could be chance' if weak else ''}){change}"),
        recommendation=_recommendation(rank, row),
    )


def _recommendation(rank: int, row: dict) -> str:
    mine, theirs = row[COMPUTE_NS_PER_STEP], row[OTHERS_COMPUTE_NS_PER_STEP]
    text = (f"Investigate rank {rank}: extra work before the collective (compare the ranks' "
            "timelines just before it), a slower GPU (compare its compute time per step "
            f"with the others': {ms_text(mine)} vs {ms_text(theirs)}), data imbalance (uneven batch or "
            "sequence lengths), host contention (CPU threads, NUMA placement, other processes).")
    if np.isfinite(mine) and np.isfinite(theirs) and theirs > 0:
        excess = mine / theirs - 1
        text += (f" Its GPU compute is {excess:.0%} above the others': look for extra or "
                 "imbalanced work on it first." if excess > 0.05 else
                 " Its GPU compute is not above the others': look at its host side first "
                 "(late launches, data loading, CPU contention).")
    return text
