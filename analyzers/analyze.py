"""``analyze(run) -> Analysis``: every analyzer over one run, and the run's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.advice import breakdown_findings
from profkit.analyzers.breakdown import PARTS, VERDICT_CLASSES, combine_breakdown
from profkit.analyzers.findings import Finding
from profkit.analyzers.summaries import RankSummary, summarize_rank
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import datacodec
from profkit.model import Run, world_size

SCHEMA = "profkit.analysis/1"


@datacodec.register
@dataclass
class Analysis:
    """Everything profkit concluded about a run; renderers and the dashboard read this."""

    run: dict[str, Any]
    verdict: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())


@dataclass
class RunHeader:
    """The run-level facts the reduce needs besides the rank summaries."""

    path: str
    meta: dict[str, Any]
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, run: Run) -> RunHeader:
        return cls(run.path, run.meta, [s.as_dict() for s in run.skipped], list(run.notes))


def run_verdict(steps: pd.DataFrame, straggler_rows: list[dict]) -> dict[str, Any]:
    """The dominant cause over every step of every rank, time-weighted."""
    if steps.empty or steps["step_ns"].sum() == 0:
        return {"primary": None, "summary": "no GPU work in the profiled steps: no verdict",
                "fractions": {}}
    total = steps[list(PARTS)].sum()
    fractions = (total / total.sum()).round(4).to_dict()
    primary = max(VERDICT_CLASSES, key=lambda c: fractions[c])
    n_ranks = steps["rank"].nunique()
    summary = (f"{primary.replace('_', ' ')} bound: {fractions[primary]:.0%} of step time over "
               f"{n_ranks} rank(s), median step {steps['step_ns'].median() / 1e6:.2f} ms")
    for s in straggler_rows:
        summary += (f"; rank {s['rank']} is a straggler: the others lose "
                    f"{s['evidence']['others_wait_ms_per_step']:.2f} ms per step waiting for it")
    return {"primary": primary, "summary": summary, "fractions": fractions}


def analyze(run: Run, thresholds: Thresholds = DEFAULT) -> Analysis:
    """Analyze ``run``: every rank summarised (:func:`summarize_rank`), then combined."""
    summaries = [summarize_rank(run.ranks[r], run.meta, thresholds) for r in run.rank_ids]
    return combine(RunHeader.of(run), summaries, thresholds)


def combine(header: RunHeader, summaries: list[RankSummary],
            thresholds: Thresholds = DEFAULT) -> Analysis:
    """The reduce: the run's analysis from its ranks' summaries alone, in any order."""
    from profkit.analyzers import comms, efficiency, groups, kernels, links, stragglers

    summaries = sorted(summaries, key=lambda s: s.rank)
    gpu = [s for s in summaries if s.has_gpu]
    metas = {s.rank: s.meta for s in summaries}
    coll = comms.match_collectives([s.collectives for s in summaries],
                                   comms.rank_hosts(header.meta, metas))
    results = [
        combine_breakdown([s.breakdown for s in summaries]), coll,
        stragglers.judge_stragglers(coll, {s.rank: s.step_stats for s in summaries}, thresholds),
        links.judge_links(coll, links.link_peak(header.meta, metas), thresholds),
        groups.find_slow_groups(coll, thresholds),
        kernels.combine_kernels([s.kernels for s in gpu], thresholds),
        efficiency.combine_efficiency([s.efficiency for s in gpu], thresholds),
    ]
    tables = {name: t for r in results for name, t in r.tables.items()}
    _split_communication(tables)
    findings = breakdown_findings(tables["rank_breakdown"], thresholds)
    findings += [f for r in results[1:] for f in r.findings]
    straggler_rows = _straggler_rows(tables.get("stragglers"))
    if not gpu:
        findings.append(Finding(category="input", severity="info", message=(
            "no GPU events in this run: the breakdown, kernels and efficiency cannot be computed"),
            recommendation="Profile with ProfilerActivity.CUDA on a GPU machine."))
    ranks = [s.rank for s in summaries]
    info = {"path": header.path, "world_size": world_size(header.meta, ranks),
            "ranks_analyzed": ranks,
            "skipped_files": list(header.skipped), "notes": list(header.notes),
            "status": header.meta.get("status"),
            "rank_errors": dict(header.meta.get("rank_errors") or {})}
    return Analysis(info, run_verdict(tables["step_breakdown"], straggler_rows), tables,
                    findings, straggler_rows)


def _split_communication(tables: dict[str, pd.DataFrame]) -> None:
    """Split each rank's exposed communication into waiting for peers (the exposed part of
    its collective waits, from the cross-rank matching) and transferring (the rest)."""
    ranks, waits = tables["rank_breakdown"], tables.get("rank_waits")
    ranks["communication_wait"] = 0.0
    if waits is None or waits.empty or ranks.empty:
        ranks["communication_transfer"] = ranks["communication"]
        return
    per_step = waits.set_index("rank")["exposed_wait_ns_per_step"]
    wait = ranks["rank"].map(per_step).fillna(0) / (ranks["step_time_ms"] * 1e6)
    ranks["communication_wait"] = np.minimum(wait, ranks["communication"])
    ranks["communication_transfer"] = ranks["communication"] - ranks["communication_wait"]


def _straggler_rows(table: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The ranks flagged as stragglers, with the numbers behind the flag."""
    if table is None or table.empty:
        return []
    rows = []
    for rec in table[table["straggler"]].to_dict("records"):
        evidence = {
            "late_share": round(float(rec["late_share"]), 3),
            "arrived_last": f"{rec['n_last']}/{rec['n_collectives']}",
            "others_wait_ms_per_step": round(rec["others_exposed_wait_ns_per_step"] / 1e6, 3),
            "others_raw_wait_ms_per_step": round(rec["others_wait_ns_per_step"] / 1e6, 3),
            "others_step_ms": round(rec["others_step_ns"] / 1e6, 3),
            "wait_frac": round(float(rec["wait_frac"]), 4),
            "compute_ms_per_step": round(rec["compute_ns_per_step"] / 1e6, 3),
            "others_compute_ms_per_step": round(rec["others_compute_ns_per_step"] / 1e6, 3),
        }
        rows.append({"rank": int(rec["rank"]), "evidence": evidence})
    return rows
