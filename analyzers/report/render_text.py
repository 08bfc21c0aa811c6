"""An Analysis as text (for a terminal) or Markdown (for a pull request). Pure functions:
Analysis in, string out.

Both say the truth about the run first (status, ranks analysed, skipped files, notes:
:mod:`~profkit.analyzers.report.header`), then the verdict and the steps it used, the step time by
part, the findings with their evidence in units (:mod:`~profkit.analyzers.report.evidence`), and the
tables the findings point at (:mod:`~profkit.analyzers.report.sections`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.findings.diagnosis import steps_line
from profkit.analyzers.measure.breakdown import PARTS
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.report import header as H
from profkit.analyzers.report import sections as sec
from profkit.analyzers.report.evidence import evidence_text
from profkit.analyzers.units import pct


def sorted_findings(a: Analysis) -> list:
    """The findings in the analysis' order: the verdict's cause first, then by estimated
    saving (analyzers/findings/consolidate.py)."""
    return list(a.findings)


def grouped_findings(a: Analysis) -> list[tuple[Any, str]]:
    """Sorted findings with the per-rank repeats of one kind (category, severity, advice)
    folded into the first (most severe, lowest rank): (finding, the other ranks as "3-7")."""
    groups: dict[tuple, list] = {}
    for f in sorted_findings(a):
        key = (f.category, f.severity, f.recommendation) if f.rank is not None else id(f)
        groups.setdefault(key, []).append(f)
    return [(fs[0], rank_ranges(f.rank for f in fs[1:])) for fs in groups.values()]


def saving_text(f) -> str:
    """'; could save ~1.47 ms/step (14%)' for a finding with an estimated saving."""
    s = f.estimated_saving or {}
    ms, frac = s.get("ms_per_step"), s.get("fraction")
    if ms is None or frac is None or not math.isfinite(ms) or not math.isfinite(frac):
        return ""
    return f"; could save ~{ms:.2f} ms/step ({pct(frac)})"


def rank_table(a: Analysis) -> pd.DataFrame:
    """One row per rank; past MAX_RANK_ROWS ranks, the spread over ranks instead (min,
    median, max of each column, with the ranks at the extremes of the step time)."""
    ranks = a.table("rank_breakdown")
    if ranks.empty:
        return ranks
    table = ranks[["rank", "steps", "step_time_ms"]].copy()
    for p in PARTS:
        table[p] = (100 * ranks[p]).round(1)
    table["primary"] = ranks["primary"]
    if len(table) <= sec.MAX_RANK_ROWS:
        return table
    numbers = table.drop(columns=["rank", "primary"])
    spread = pd.DataFrame({"min": numbers.min(), "median": numbers.median(),
                           "max": numbers.max()}).T.round(1)
    fastest, slowest = (table.loc[table["step_time_ms"].idxmin(), "rank"],
                        table.loc[table["step_time_ms"].idxmax(), "rank"])
    spread.insert(0, "over ranks", ["min", "median", "max"])
    spread["rank (step time)"] = [int(fastest), "", int(slowest)]
    return spread


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown_table(table: pd.DataFrame) -> list[str]:
    """A DataFrame as Markdown table lines (floats to 4 significant digits)."""
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return lines


# --- text ---------------------------------------------------------------------------------

def text_table(table: pd.DataFrame, indent: str = "  ") -> list[str]:
    """Lines of a table of display strings: names left-aligned, numbers right-aligned."""
    cells = {c: [str(v) for v in table[c]] for c in table.columns}
    lines = []
    for row in [list(map(str, table.columns))] + [list(r) for r in zip(*cells.values())]:
        lines.append(indent + "  ".join(_align(v, c, cells[c]) for v, c in zip(row, cells)))
    return [line.rstrip() for line in lines]


def _align(value: str, column: str, values: list[str]) -> str:
    width = max([len(column)] + [len(v) for v in values])
    numeric = all(not v or v[0] in "0123456789-+." for v in values)
    return value.rjust(width) if numeric else value.ljust(width)


def text_header(run: dict[str, Any]) -> list[str]:
    """The first lines of the text report: status, ranks, skipped files, notes."""
    lines = [f"profkit analysis of {run['path']}"]
    status = H.status_line(run)
    if status:
        lines.append(f"RUN STATUS: {status}")
    lines.append(H.ranks_line(run))
    lines += [f"skipped: {s}" for s in H.skipped_lines(run)]
    lines += [f"note: {n}" for n in H.note_lines(run)]
    return lines


def to_text(a: Analysis) -> str:
    lines = text_header(a.run) + ["", f"VERDICT: {a.verdict['summary']}"]
    if a.run.get("steps"):
        lines.append(f"steps used: {steps_line(a.run['steps'])}")
    lines.append("")
    table = rank_table(a)
    if not table.empty:
        lines += ["Step time by part, % (per rank):",
                  table.to_string(index=False, float_format=lambda v: f"{v:.1f}"), ""]
    for s in a.stragglers:
        lines.append(f"STRAGGLER: rank {s['rank']}: "
                     f"{evidence_text('straggler_row', s['evidence'])}")
    lines += _text_findings(a)
    for section in sec.sections(a):
        lines += ["", f"{section.title}:"] + text_table(section.table)
        lines += [f"  ({n})" for n in section.notes]
    return "\n".join(lines) + "\n"


def _text_findings(a: Analysis) -> list[str]:
    grouped = grouped_findings(a)
    findings = [g for g in grouped if g[0].severity != "info"] or grouped[:3]
    lines = ["", "Findings and what to change:"] if findings else []
    for f, others in findings:
        also = f" (similar on ranks {others})" if others else ""
        lines.append(f"- [{f.severity}] {f.message}{also}{saving_text(f)}")
        evidence = evidence_text(f.category, f.evidence)
        if evidence:
            lines.append(f"    evidence: {evidence}")
        lines.append(f"    do: {f.recommendation}")
    return lines


# --- Markdown -----------------------------------------------------------------------------

def markdown_header(run: dict[str, Any]) -> list[str]:
    lines = [f"## profkit analysis: `{run['path']}`", ""]
    status = H.status_line(run)
    if status:
        lines.append(f"- **Run status:** {status}")
    lines.append(f"- {H.ranks_line(run)}")
    lines += [f"- **Skipped:** {_md(s)}" for s in H.skipped_lines(run)]
    lines += [f"- **Note:** {_md(n)}" for n in H.note_lines(run)]
    return lines + [""]


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;")


def to_markdown(a: Analysis) -> str:
    lines = markdown_header(a.run) + [f"**Verdict:** {a.verdict['summary']}", ""]
    if a.run.get("steps"):
        lines += [f"Steps used: {steps_line(a.run['steps'])}", ""]
    table = rank_table(a)
    if not table.empty:
        lines += markdown_table(table) + [""]
    for s in a.stragglers:
        lines.append(f"**Straggler:** rank {s['rank']} "
                     f"({evidence_text('straggler_row', s['evidence'])})")
    findings = grouped_findings(a)
    if findings:
        lines += ["", "### Findings", "", "| severity | rank | finding | evidence | what to change |",
                  "|---|---|---|---|---|"]
    for f, others in findings:
        rank = "run" if f.rank is None else ",".join(filter(None, [str(f.rank), others]))
        lines.append(f"| {f.severity} | {rank} | {_md(f.message)}{saving_text(f)} | "
                     f"{_md(evidence_text(f.category, f.evidence))} | {_md(f.recommendation)} |")
    for section in sec.sections(a):
        cells = section.table.astype(str).map(lambda v: v.replace("<", "&lt;"))
        lines += ["", f"### {section.title}", ""] + markdown_table(cells)
        lines += [""] + [f"_{_md(n)}_" for n in section.notes]
    return "\n".join(lines) + "\n"
