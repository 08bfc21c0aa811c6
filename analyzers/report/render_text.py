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
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.parts import BY_KEY, PART_NAMES, PARTS, part_label
from profkit.analyzers.report import header as H
from profkit.analyzers.report import headline as HL
from profkit.analyzers.report import sections as sec
from profkit.analyzers.report.evidence import evidence_text
from profkit.analyzers.report.inference_sections import inference_line
from profkit.analyzers.units import pct

from profkit.textout import PIPE_WIDTH, glue, table_lines, wrap

# Categories whose message and advice already state every number of their evidence (the
# straggler's: its late arrivals, what the others lose, its compute against theirs): the
# text and Markdown reports give them no evidence line, so that each fact is said once.
SAID_IN_MESSAGE = {"straggler"}
STEP_MS = "step ms"  # the step time column of the step-time-by-part table


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
    per = s.get("per") or "step"
    return f"; could save ~{ms:.2f} ms/{per} ({pct(frac)})"


def rank_table(a: Analysis) -> pd.DataFrame:
    """One row per rank: step time (ms), each part's % of it, the largest part; past
    MAX_RANK_ROWS ranks, the spread over ranks instead (min, median, max of each column,
    with the ranks at the extremes of the step time). Columns as the reports name them."""
    ranks = a.table("rank_breakdown")
    if ranks.empty:
        return ranks
    table = pd.DataFrame({"rank": ranks["rank"], STEP_MS: ranks["step_time_ms"]})
    for p in shown_parts(ranks):
        table[part_label(p)] = (100 * ranks[p]).round(1)
    table["primary"] = [part_label(str(p)) for p in ranks["primary"]]
    if len(table) <= sec.MAX_RANK_ROWS:
        return table
    numbers = table.drop(columns=["rank", "primary"])
    spread = pd.DataFrame({"min": numbers.min(), "median": numbers.median(),
                           "max": numbers.max()}).T.round(1)
    fastest, slowest = (table.loc[table[STEP_MS].idxmin(), "rank"],
                        table.loc[table[STEP_MS].idxmax(), "rank"])
    spread.insert(0, "over ranks", ["min", "median", "max"])
    spread["rank (step time)"] = [int(fastest), "", int(slowest)]
    return spread



def shown_parts(ranks: pd.DataFrame) -> list[str]:
    """The parts of the rank table: all but an optional one no rank has time in."""
    return [p for p in PARTS if not BY_KEY[p].optional or (ranks[p] > 0).any()]


def part_legend(parts=None) -> str:
    """What the part names that need it mean (``held work: queued, ...``), of ``parts``
    (every part when not given)."""
    return "; ".join(f"{part_label(p)}: {name.split(' (', 1)[1].rstrip(')')}"
                     for p, name in PART_NAMES.items()
                     if " (" in name and (parts is None or p in parts))


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown_table(table: pd.DataFrame) -> list[str]:
    """A DataFrame as Markdown table lines (floats to 4 significant digits)."""
    lines = ["| " + " | ".join(map(str, table.columns)) + " |", "|" + "---|" * len(table.columns)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(_fmt(v).replace("|", "\\|") for v in row) + " |")
    return lines


# --- text ---------------------------------------------------------------------------------

def text_table(table: pd.DataFrame, width: int = PIPE_WIDTH, indent: str = "  ",
               clip: tuple[str, ...] = (), fold: tuple[str, ...] = ()) -> list[str]:
    """Lines of a table of display strings within ``width`` columns: names left-aligned,
    numbers right-aligned (:func:`profkit.textout.table_lines`); ``clip``: the name columns
    that may be cut to fit, ``fold``: the descriptive ones that may wrap."""
    columns = [str(c) for c in table.columns]
    rows = [[_cell(v) for v in row] for row in table.itertuples(index=False)]
    return table_lines(columns, rows, width, indent,
                       clip=[i for i, c in enumerate(columns) if c in clip],
                       fold=[i for i, c in enumerate(columns) if c in fold])


def _cell(v: Any) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def text_header(run: dict[str, Any], width: int = PIPE_WIDTH) -> list[str]:
    """The first lines of the text report: status, ranks, skipped files, notes."""
    lines = [f"profkit analysis of {run['path']}"]  # the title: one line, however long
    status = H.status_line(run)
    if status:
        lines += wrap(status, width, "RUN STATUS: ", "  ")
    lines += wrap(H.ranks_line(run), width)
    for s in H.skipped_lines(run, path=glue):
        lines += wrap(s, width, "skipped: ", "  ")
    for n in H.note_lines(run):
        lines += wrap(n, width, "note: ", "  ")
    return lines


def to_text(a: Analysis, width: int = PIPE_WIDTH) -> str:
    """The report for a terminal of ``width`` columns: prose wrapped at spaces, tables
    fitted (headers over two lines, long names cut, or split), no line longer except a
    word that is (a long path)."""
    lines = text_header(a.run, width)
    if sec.layout_line(a):
        lines += wrap(sec.layout_line(a), width, "parallel layout: ", "  ")
    lines += [""] + _headline_lines(a, width)
    if a.run.get("steps"):
        lines += wrap(steps_line(a.run["steps"]), width, "steps used: ", "  ")
    if inference_line(a):
        lines += wrap(inference_line(a), width, "inference: ", "  ")
    table = rank_table(a)
    if not table.empty:
        lines += ["", "Step time by part, % (per rank):"] + text_table(table, width)
        lines += wrap(f"({part_legend(shown_parts(a.table('rank_breakdown')))})", width, "  ",
                      "   ")
    for s in _stragglers_without_finding(a):
        lines += [""] + wrap(f"rank {s['rank']}: "
                             f"{evidence_text('straggler_row', s['evidence'])}",
                             width, "STRAGGLER: ", "  ")
    lines += _text_findings(a, width)
    for section in sec.sections(a):
        lines += [""] + wrap(f"{section.title}:", width)
        lines += text_table(section.table, width, clip=section.clip, fold=section.fold)
        for n in section.notes:
            lines += wrap(f"({n})", width, "  ", "   ")
    return "\n".join(lines) + "\n"


def _headline_lines(a: Analysis, width: int) -> list[str]:
    """The biggest win first, beside the verdict (analyzers/report/headline.py)."""
    win = HL.win_text(a)
    lines = wrap(win, width, "BIGGEST WIN: ", "  ") if win else []
    return lines + wrap(HL.verdict_text(a), width, "VERDICT: ", "  ")


def _stragglers_without_finding(a: Analysis) -> list[dict]:
    """The analysis' stragglers that no finding reports (a finding says it all)."""
    told = {f.rank for f, _ in grouped_findings(a) if f.category == "straggler"}
    return [s for s in a.stragglers if s["rank"] not in told]


def finding_evidence(f) -> str:
    """The evidence line of a finding, empty where its message says it all."""
    return "" if f.category in SAID_IN_MESSAGE else evidence_text(f.category, f.evidence)


def _text_findings(a: Analysis, width: int) -> list[str]:
    grouped = grouped_findings(a)
    findings = [g for g in grouped if g[0].severity != "info"] or grouped[:3]
    lines = ["", "Findings and what to change:"] if findings else []
    together = HL.combined_text(a)
    if findings and together:
        lines += wrap(f"({together})", width, "  ", "   ")
    for f, others in findings:
        also = f" (similar on {'rank' if others.isdigit() else 'ranks'} {others})" if others else ""
        lines += wrap(f"[{f.severity}] {f.message}{also}{saving_text(f)}", width, "- ", "  ")
        evidence = finding_evidence(f)
        if evidence:
            lines += wrap(evidence, width, "    evidence: ", "      ")
        lines += wrap(f.recommendation, width, "    do: ", "      ")
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
    lines = markdown_header(a.run)
    if sec.layout_line(a):
        lines[-1:-1] = [f"- **Parallel layout:** {sec.layout_line(a)}"]
    win = HL.win_text(a)
    lines += ([f"**Biggest win:** {_md(win)}", ""] if win else [])
    lines += [f"**Verdict:** {_md(HL.verdict_text(a))}", ""]
    if a.run.get("steps"):
        lines += [f"Steps used: {steps_line(a.run['steps'])}", ""]
    if inference_line(a):
        lines += [f"**Inference:** {_md(inference_line(a))}", ""]
    table = rank_table(a)
    if not table.empty:
        legend = part_legend(shown_parts(a.table("rank_breakdown")))
        lines += markdown_table(table) + ["", f"_{_md(legend)}_", ""]
    for s in _stragglers_without_finding(a):
        lines.append(f"**Straggler:** rank {s['rank']} "
                     f"({evidence_text('straggler_row', s['evidence'])})")
    findings = grouped_findings(a)
    if findings:
        lines += ["", "### Findings", "", "| severity | rank | finding | evidence | what to change |",
                  "|---|---|---|---|---|"]
        together = HL.combined_text(a)
        if together:
            lines[-2:-2] = [f"_{_md(together[0].upper() + together[1:])}._", ""]
    for f, others in findings:
        rank = "run" if f.rank is None else ",".join(filter(None, [str(f.rank), others]))
        lines.append(f"| {f.severity} | {rank} | {_md(f.message)}{saving_text(f)} | "
                     f"{_md(finding_evidence(f))} | {_md(f.recommendation)} |")
    for section in sec.sections(a):
        cells = section.table.astype(str).map(lambda v: v.replace("<", "&lt;"))
        lines += ["", f"### {section.title}", ""] + markdown_table(cells)
        lines += [""] + [f"_{_md(n)}_" for n in section.notes]
    return "\n".join(lines) + "\n"
