"""``analyze(run) -> Analysis``: every analyzer over one run, and the run's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers import measurements
from profkit.analyzers.findings.advice import breakdown_findings
from profkit.analyzers.findings.compilation import compile_findings
from profkit.analyzers.findings.consolidate import consolidate
from profkit.analyzers.findings.diagnosis import UNUSABLE_WHY
from profkit.analyzers.findings.pipeline import verdict_note as pipeline_note
from profkit.analyzers.measure.breakdown import (
    HOST_SIDE,
    PARTS,
    dominant_part,
)
from profkit.analyzers.measure.compilation import COMPILE_NS
from profkit.analyzers.measure.steps import compiling_ranks, run_median_step_ms
from profkit.analyzers.options import DEFAULT_OPTIONS, AnalysisOptions
from profkit.analyzers.parts import PART_NAMES, part_label, part_name  # noqa: F401 (re-exported)
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.summaries import RankSummary, summarize_rank
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import datacodec
from profkit.model import Run, world_size
from profkit.strings import with_python_strings
from profkit.textout import plural, ranks_text

SCHEMA = "profkit.analysis/1"
NO_GPU_EVENTS = "no GPU events in this run"
TOP_OPS = 50  # CPU ops kept for a run without GPU events (as kernels.combine_kernels keeps)


@datacodec.register
@dataclass(repr=False)
class Analysis:
    """Everything profkit concluded about a run; renderers and the dashboard read this."""

    run: dict[str, Any]
    verdict: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame:
        return self.tables.get(name, pd.DataFrame())

    def __repr__(self) -> str:
        """One line: the run, its ranks and the verdict (the tables and findings are
        attributes; a notebook shows them through ``_repr_html_``)."""
        ranks = (self.run or {}).get("ranks_analyzed") or []
        summary = str((self.verdict or {}).get("summary", ""))
        return (f"<Analysis of {(self.run or {}).get('path')!s}: "
                f"{ranks_text(ranks) if ranks else 'no ranks'}; {summary}; "
                f"{plural(len(self.findings), 'finding')}>")

    def _repr_html_(self) -> str:
        """Notebook display: verdict, breakdown chart, findings (see analyzers/report/html.py)."""
        from profkit.analyzers.report.html import analysis_html

        return analysis_html(self)


@dataclass
class RunHeader:
    """The run-level facts the reduce needs besides the rank summaries."""

    path: str
    meta: dict[str, Any]
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ncu: pd.DataFrame | None = None  # Nsight Compute's measured launches (profkit ncu)

    @classmethod
    def of(cls, run: Run) -> RunHeader:
        return cls(run.path, run.meta, [s.as_dict() for s in run.skipped], list(run.notes),
                   run.ncu)


def run_verdict(steps: pd.DataFrame, straggler_rows: list[dict],
                unusable: dict[int, str] | None = None, cpu_only: bool = False) -> dict[str, Any]:
    """The dominant cause over the used steps of every usable rank, time-weighted.
    ``cpu_only``: no rank has a GPU event (then there is nothing to charge)."""
    recorded = steps
    if not steps.empty:
        steps = steps[steps["used"].astype(bool) & ~steps["rank"].isin(list(unusable or {}))]
    if steps.empty or steps["step_ns"].sum() == 0:
        reasons = set(recorded["excluded_reason"]) if len(recorded) else set()
        causes = set((unusable or {}).values()) | {"capture" for r in reasons if "capture" in r}
        cause = next((c for c in UNUSABLE_WHY if c in causes), None)
        why = (_compile_why(recorded, unusable or {}) if cause == "compile"
               else UNUSABLE_WHY[cause] if cause
               else NO_GPU_EVENTS if cpu_only else "no GPU work in the profiled steps")
        return {"primary": None, "summary": f"{why}: no verdict", "fractions": {}}
    total = steps[list(PARTS)].sum()
    fractions = (total / total.sum()).to_dict()  # unrounded: each view rounds it once
    primary = dominant_part(fractions)
    n_ranks = steps["rank"].nunique()
    median_ms = run_median_step_ms(steps)
    if (steps["step"] < 0).all():  # no step ranges: the trace's window, one per rank
        window_ms, median_ms = median_ms, None
        summary = (f"{_bound_text(primary, fractions)} over {plural(n_ranks, 'rank')}, in one "
                   f"{window_ms:.2f} ms window (no steps recorded)")
    else:
        summary = (f"{_bound_text(primary, fractions)} over {plural(n_ranks, 'rank')}, "
                   f"median step {median_ms:.2f} ms")
    for s in straggler_rows:
        where = s["evidence"].get("wait_collective")
        summary += (f"; rank {s['rank']} is a straggler: the others lose "
                    f"{s['evidence']['others_wait_ms_per_step']:.2f} ms per step waiting for it"
                    + (f" in {where}" if where else ""))
    return {"primary": primary, "summary": summary, "fractions": fractions,
            "median_step_ms": median_ms}


def _compile_why(recorded: pd.DataFrame, unusable: dict[int, str]) -> str:
    """'every profiled step compiles (3 of 3, 99% of each in torch.compile), ...': the ranks
    whose every used step compiles (``steps.compiling_ranks``) give no verdict."""
    compiling = [r for r, why in unusable.items() if why == "compile"]
    rows = recorded[recorded["rank"].isin(compiling) & recorded["used"].astype(bool)]
    share = rows[COMPILE_NS] / rows["step_ns"].clip(lower=1)
    low, high = f"{share.min():.0%}", f"{share.max():.0%}"
    per_rank = rows.groupby("rank").size()
    steps = (f"{per_rank.iloc[0]} of {per_rank.iloc[0]}" if per_rank.nunique() == 1
             else f"{len(rows)} rank-steps")
    return (f"{UNUSABLE_WHY['compile']} ({steps}, {low if low == high else f'{low}-{high}'} "
            "of each in torch.compile), so none shows the steady state")


def _bound_text(primary: str, fractions: dict[str, float]) -> str:
    """'compute bound: 92% of step time'; on the host side with both parts present,
    'host bound: 48% of step time (launch overhead 35%, host work 13%)'."""
    if primary in HOST_SIDE and min(fractions[p] for p in HOST_SIDE) >= 0.05:
        split = ", ".join(f"{part_name(p)} {fractions[p]:.0%}"
                          for p in sorted(HOST_SIDE, key=lambda p: -fractions[p]))
        total = sum(fractions[p] for p in HOST_SIDE)
        return f"host bound: {total:.0%} of step time ({split})"
    return f"{part_name(primary)} bound: {fractions[primary]:.0%} of step time"


@with_python_strings
def analyze(run: Run, thresholds: Thresholds = DEFAULT,
            options: AnalysisOptions = DEFAULT_OPTIONS, *,
            flops_per_step: float | None = None, peak_tflops: float | None = None) -> Analysis:
    """Analyze ``run``: every rank summarised (:func:`summarize_rank`), then combined.
    ``flops_per_step`` / ``peak_tflops`` replace those of ``thresholds`` (MFU options)."""
    from profkit.analyzers.thresholds import with_mfu_options

    thresholds = with_mfu_options(thresholds, flops_per_step, peak_tflops)
    summaries = [summarize_rank(run.ranks[r], run.meta, thresholds, options)
                 for r in run.rank_ids]
    return combine(RunHeader.of(run), summaries, thresholds)


def combine(header: RunHeader, summaries: list[RankSummary],
            thresholds: Thresholds = DEFAULT) -> Analysis:
    """The reduce: the run's analysis from its ranks' summaries alone, in any order. A
    rank whose events all start at one instant has no timeline: only its finding speaks of
    it. Figures that break physics are notes, not numbers (findings/trust.py)."""
    from profkit.analyzers.findings import diagnosis

    summaries = sorted(summaries, key=lambda s: s.rank)
    health = {s.rank: s.breakdown.get("health") or {} for s in summaries}
    unusable = diagnosis.unusable_ranks(health)
    timed = [s for s in summaries if unusable.get(s.rank) != "collapsed"]
    gpu = [s for s in timed if s.has_gpu]
    results, untrusted = _measure(header, timed, {s.rank: s.meta for s in summaries},
                                  thresholds)
    tables = {name: t for r in results.values() for name, t in r.tables.items()}
    unusable.update({r: "compile" for r in compiling_ranks(tables["step_breakdown"],
                                                            thresholds.compile_step_frac)
                     if r not in unusable})
    tables["rank_breakdown"] = tables["rank_breakdown"][
        ~tables["rank_breakdown"]["rank"].isin(list(unusable))].reset_index(drop=True)
    _split_communication(tables)
    straggler_rows = _straggler_rows(tables.get("stragglers"))
    verdict = run_verdict(tables["step_breakdown"], straggler_rows, unusable, cpu_only=not gpu)
    if verdict["primary"] is not None:  # a pipeline's bubble beside the bound (its own part)
        verdict["summary"] += pipeline_note(results.get("pipeline"))
    steps = diagnosis.steps_report(tables["step_breakdown"],
                                   {s.rank: s.breakdown.get("steps_info") or {} for s in timed},
                                   tables.get("compilation"))
    findings = diagnosis.health_findings(health, unusable)
    findings += breakdown_findings(tables["rank_breakdown"], thresholds,
                                   tables["step_breakdown"], tables["transfers"],
                                   tables.get("host_work_where"), tables.get("idle_code"))
    findings += compile_findings(tables.get("compilation"), tables["step_breakdown"], thresholds)
    findings += diagnosis.idle_code_findings(
        tables.get("idle_code", pd.DataFrame()), tables["rank_breakdown"], verdict["primary"],
        {int(r): len(v["used"]) for r, v in steps.items()}, tables["step_breakdown"])
    findings += measurements.judge_all(results, thresholds)
    findings = _drop_unsupported(findings, unusable, {s.rank for s in gpu})
    findings = consolidate(findings, tables, verdict, header.meta.get("torch_settings"))
    if not gpu and not unusable:  # (kernel records lost is a finding of its own)
        findings = _cpu_only(summaries, tables, findings)
    ranks = [s.rank for s in summaries]
    notes = list(header.notes) + untrusted + diagnosis.step_notes(
        steps, tables.get("one_off_calls", pd.DataFrame()))
    info = {"path": header.path, "world_size": world_size(header.meta, ranks),
            "ranks_analyzed": ranks,
            "skipped_files": list(header.skipped), "notes": notes,
            "rank_files": header.meta.get("rank_files") or {},
            "status": header.meta.get("status"), "steps": steps,
            "rank_errors": dict(header.meta.get("rank_errors") or {})}
    return Analysis(info, verdict, tables, findings, straggler_rows)


def _measure(header: RunHeader, timed: list[RankSummary], metas: dict[int, dict],
             thresholds: Thresholds) -> tuple[dict[str, Result], list[str]]:
    """Every registered measurement combined over the ranks with a timeline
    (:data:`~profkit.analyzers.measurements.MEASUREMENTS`): {name: result} in registry
    order, and the notes on the figures that broke physics and were dropped."""
    ctx = measurements.Combining(header, metas, thresholds)
    return measurements.combine_all(timed, ctx), ctx.notes


def _cpu_only(summaries: list[RankSummary], tables: dict[str, pd.DataFrame],
              findings: list[Finding]) -> list[Finding]:
    """A run without GPU events: the CPU ops are what it shows (``top_ops``, with each rank's
    recorded steps in ``cpu_steps`` to count them per step), and one finding says why there
    is nothing else, not one per analysis that needs GPU events."""
    from profkit.analyzers.findings import diagnosis
    from profkit.analyzers.measure.kernels import top_ops

    tables["top_ops"] = top_ops([s.cpu_ops for s in summaries if s.cpu_ops is not None], TOP_OPS)
    tables["cpu_steps"] = pd.DataFrame({
        "rank": [s.rank for s in summaries],
        "steps": [int((s.breakdown.get("steps_info") or {}).get("count") or 0) for s in summaries]})
    launches = {s.rank: int(s.values.get("launch_calls") or 0) for s in summaries}
    return [f for f in findings if not _needs_gpu_events(f)] + \
        [diagnosis.no_gpu_finding({r: n for r, n in launches.items() if n})]


def _needs_gpu_events(f: Finding) -> bool:
    """A finding that only says an analysis was skipped for want of GPU events."""
    return f.category == "coverage" and f.message.lower().startswith(NO_GPU_EVENTS.lower())


def _drop_unsupported(findings: list[Finding], unusable: dict[int, str],
                      gpu_ranks: set[int]) -> list[Finding]:
    """Findings a rank's trace cannot support (graph capture only, kernel records lost,
    every step compiling) go: only the finding that says why stays."""
    if not unusable:
        return findings
    nothing_left = not (gpu_ranks - set(unusable))
    return [f for f in findings if f.category in ("trace", "compile")
            or (f.rank not in unusable and not (nothing_left and f.rank is None))]


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
            "p_value": float(f"{rec['p_value']:.3g}"),
            "arrived_last": f"{rec['n_last']}/{rec['n_collectives']}",
            # to the ns: the verdict and the finding round it once, to the same figure
            "others_wait_ms_per_step": round(rec["others_exposed_wait_ns_per_step"] / 1e6, 6),
            "others_raw_wait_ms_per_step": round(rec["others_wait_ns_per_step"] / 1e6, 3),
            "others_step_ms": round(rec["others_step_ns"] / 1e6, 3),
            "wait_frac": round(float(rec["wait_frac"]), 4),
            "compute_ms_per_step": round(rec["compute_ns_per_step"] / 1e6, 3),
            "others_compute_ms_per_step": round(rec["others_compute_ns_per_step"] / 1e6, 3),
            "wait_collective": rec.get("wait_collective") or "",
        }
        rows.append({"rank": int(rec["rank"]), "evidence": evidence})
    return rows
