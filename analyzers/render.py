"""An Analysis as text (for a terminal), Markdown (for a pull request) or the JSON contract
(``profkit.analysis/1``). Pure functions: Analysis in, string or dict out."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.analyze import SCHEMA, Analysis
from profkit.analyzers.breakdown import PARTS
from profkit.analyzers.diagnosis import steps_line
from profkit.analyzers.tables import rank_ranges

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
MAX_RANK_ROWS = 16  # larger runs get a per-part distribution instead of a row per rank
MAX_STATUS_RANKS = 3  # the status line names this many failed ranks, then counts the rest


def clean_json(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(a: Analysis) -> dict[str, Any]:
    ranks = a.table("rank_breakdown")
    rank_rows = [{
        "rank": int(r["rank"]), "steps": int(r["steps"]), "step_time_ms": float(r["step_time_ms"]),
        "breakdown": {p: float(r[p]) for p in PARTS}, "verdict": {"primary": r["primary"]},
        "communication_split": {"wait": float(r.get("communication_wait", 0.0)),
                                "transfer": float(r.get("communication_transfer", r["communication"]))},
        "comm_overlap_frac": r.get("comm_overlap_frac"),
    } for r in ranks.to_dict("records")]
    doc = {
        "schema": SCHEMA,
        "run": a.run,
        "verdict": a.verdict,
        "ranks": rank_rows,
        "stragglers": a.stragglers,
        "findings": [f.as_dict() for f in sorted_findings(a)],
    }
    return clean_json(doc)


def sorted_findings(a: Analysis) -> list:
    """The findings in the analysis' order: the verdict's cause first, then by estimated
    saving (analyzers/consolidate.py)."""
    return list(a.findings)


def _rank_table(a: Analysis) -> pd.DataFrame:
    """One row per rank; past MAX_RANK_ROWS ranks, the spread over ranks instead (min,
    median, max of each column, with the ranks at the extremes of the step time)."""
    ranks = a.table("rank_breakdown")
    if ranks.empty:
        return ranks
    table = ranks[["rank", "steps", "step_time_ms"]].copy()
    for p in PARTS:
        table[p] = (100 * ranks[p]).round(1)
    table["primary"] = ranks["primary"]
    if len(table) <= MAX_RANK_ROWS:
        return table
    numbers = table.drop(columns=["rank", "primary"])
    spread = pd.DataFrame({"min": numbers.min(), "median": numbers.median(),
                           "max": numbers.max()}).T.round(1)
    fastest, slowest = (table.loc[table["step_time_ms"].idxmin(), "rank"],
                        table.loc[table["step_time_ms"].idxmax(), "rank"])
    spread.insert(0, "over ranks", ["min", "median", "max"])
    spread["rank (step time)"] = [int(fastest), "", int(slowest)]
    return spread


def grouped_findings(a: Analysis) -> list[tuple[Any, str]]:
    """Sorted findings with the per-rank repeats of one kind (category, severity, advice)
    folded into the first (most severe, lowest rank): (finding, the other ranks as "3-7")."""
    groups: dict[tuple, list] = {}
    for f in sorted_findings(a):
        key = (f.category, f.severity, f.recommendation) if f.rank is not None else id(f)
        groups.setdefault(key, []).append(f)
    return [(fs[0], rank_ranges(f.rank for f in fs[1:])) for fs in groups.values()]


def status_line(run: dict[str, Any]) -> str | None:
    """``failed (rank 1: RuntimeError: boom)`` when the run did not end well, else None:
    the first thing a reader of a failed run's report must see."""
    status = run.get("status")
    if status in (None, "ok"):
        return None
    errors = sorted((run.get("rank_errors") or {}).items(), key=lambda kv: _rank_key(kv[0]))
    shown = [f"rank {r}: {_clip(why)}" for r, why in errors[:MAX_STATUS_RANKS]]
    if len(errors) > MAX_STATUS_RANKS:
        shown.append(f"{len(errors) - MAX_STATUS_RANKS} more rank(s)")
    return f"{status} ({'; '.join(shown)})" if shown else str(status)


def _rank_key(rank: Any) -> tuple[int, str]:
    return (int(rank), "") if str(rank).isdigit() else (1 << 62, str(rank))


def _clip(text: Any, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def to_text(a: Analysis) -> str:
    lines = [f"profkit analysis of {a.run['path']}"]
    status = status_line(a.run)
    if status:
        lines.append(f"RUN STATUS: {status}")
    lines += ["", f"VERDICT: {a.verdict['summary']}"]
    if a.run.get("steps"):
        lines.append(f"steps used: {steps_line(a.run['steps'])}")
    lines += [f"note: {n}" for n in a.run.get("notes", [])] + [""]
    table = _rank_table(a)
    if not table.empty:
        lines += ["Step time by part, % (per rank):",
                  table.to_string(index=False, float_format=lambda v: f"{v:.1f}"), ""]
    for s in a.stragglers:
        lines.append(f"STRAGGLER: rank {s['rank']}  {_evidence(s['evidence'])}")
    grouped = grouped_findings(a)
    findings = [g for g in grouped if g[0].severity != "info"] or grouped[:3]
    if findings:
        lines += ["", "Findings and what to change:"]
    for f, others in findings:
        also = f" (similar on ranks {others})" if others else ""
        lines.append(f"- [{f.severity}] {f.message}{also}{saving_text(f)}")
        lines.append(f"    evidence: {_evidence(f.evidence)}")
        lines.append(f"    do: {f.recommendation}")
    for s in a.run["skipped_files"]:
        lines.append(f"skipped: {s['path']}: {s['reason']}")
    return "\n".join(lines) + "\n"


def saving_text(f) -> str:
    """'; could save ~1.47 ms/step (14%)' for a finding with an estimated saving."""
    s = f.estimated_saving or {}
    ms, frac = s.get("ms_per_step"), s.get("fraction")
    if ms is None or frac is None or not math.isfinite(ms) or not math.isfinite(frac):
        return ""
    return f"; could save ~{ms:.2f} ms/step ({frac:.0%})"


def _evidence(evidence: dict) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in evidence.items())


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown_table(table: pd.DataFrame) -> list[str]:
    """A DataFrame as Markdown table lines (floats to 4 significant digits)."""
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return lines


def to_markdown(a: Analysis) -> str:
    lines = [f"## profkit analysis: `{a.run['path']}`", ""]
    status = status_line(a.run)
    if status:
        lines += [f"**Run status:** {status}", ""]
    lines += [f"**Verdict:** {a.verdict['summary']}", ""]
    if a.run.get("steps"):
        lines += [f"Steps used: {steps_line(a.run['steps'])}", ""]
    lines += [f"- {n}" for n in a.run.get("notes", [])] + ([""] if a.run.get("notes") else [])
    table = _rank_table(a)
    if not table.empty:
        lines += markdown_table(table) + [""]
    for s in a.stragglers:
        lines.append(f"**Straggler:** rank {s['rank']} ({_evidence(s['evidence'])})")
    findings = grouped_findings(a)
    if findings:
        lines += ["", "### Findings", "", "| severity | rank | finding | what to change |",
                  "|---|---|---|---|"]
    for f, others in findings:
        rank = "run" if f.rank is None else ",".join(filter(None, [str(f.rank), others]))
        lines.append(f"| {f.severity} | {rank} | {f.message}{saving_text(f)} | {f.recommendation} |")
    return "\n".join(lines) + "\n"
