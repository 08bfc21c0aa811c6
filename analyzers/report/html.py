"""Analysis and Diff as self-contained HTML for notebooks (``_repr_html_``): the verdict, a
breakdown chart drawn with plain HTML bars, the findings. Inline styles only: no script, no
stylesheet or font from a URL, so it renders the same offline and in a sanitising viewer."""

from __future__ import annotations

from html import escape
from typing import Any

import pandas as pd
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.compare.diff import Diff
from profkit.analyzers.parts import NOTEBOOK_COLORS, PARTS, part_name
from profkit.analyzers.report import headline as HL
from profkit.analyzers.report.inference_sections import inference_line
from profkit.analyzers.report.memoryline import memory_line
from profkit.analyzers.report.render_text import saving_text

from profkit.textout import plural

PART_COLORS = NOTEBOOK_COLORS  # one colour per part, colour-blind-safe (parts.py)
SEVERITY_COLORS = {"critical": "#B00020", "warning": "#B26A00", "info": "#555555"}
MAX_RANK_BARS = 16  # past this, the run's bar only (the text report shows the spread)
MAX_FINDINGS = 30
MAX_DIFF_ROWS = 10
BOX = "font-family:sans-serif;font-size:13px;line-height:1.4;max-width:900px"


def _bar(fractions: dict[str, float], label: str) -> str:
    """One stacked horizontal bar: a segment per part, width its share of the step."""
    segments = "".join(
        f'<div title="{escape(part_name(p))}: {fractions[p]:.1%}" style="width:'
        f'{100 * fractions[p]:.3f}%;background:{PART_COLORS.get(p, "#777")}"></div>'
        for p in PARTS if fractions.get(p, 0) > 0)
    return (f'<div style="display:flex;align-items:center;margin:2px 0">'
            f'<div style="width:80px">{escape(label)}</div>'
            f'<div style="display:flex;height:16px;flex:1;background:#eee">{segments}</div>'
            f'</div>')


def _legend(fractions: dict[str, float]) -> str:
    items = "".join(
        f'<span style="margin-right:12px"><span style="display:inline-block;width:10px;'
        f'height:10px;background:{PART_COLORS.get(p, "#777")}"></span> '
        f'{escape(part_name(p))} {fractions.get(p, 0):.1%}</span>' for p in PARTS)
    return f'<div style="margin:4px 0 8px 80px;font-size:12px">{items}</div>'


def breakdown_chart(verdict: dict[str, Any], ranks: pd.DataFrame) -> str:
    """The run's step-time breakdown, and each rank's when there are few enough ranks."""
    fractions = verdict.get("fractions") or {}
    if not fractions:
        return ""
    bars = [_bar(fractions, "run")]
    if not ranks.empty and len(ranks) <= MAX_RANK_BARS and set(PARTS) <= set(ranks.columns):
        bars += [_bar({p: float(row[p]) for p in PARTS}, f"rank {int(row['rank'])}")
                 for _, row in ranks.iterrows()]
    return "<h4>Where the step time goes</h4>" + "".join(bars) + _legend(fractions)


def findings_list(findings: list) -> str:
    if not findings:
        return "<p>No findings.</p>"
    items = []
    for f in findings[:MAX_FINDINGS]:
        color = SEVERITY_COLORS.get(f.severity, "#555")
        todo = (f'<br><span style="color:#333">do: {escape(f.recommendation)}</span>'
                if f.recommendation else "")
        saving = saving_text(f).lstrip("; ")
        saving = f' <b>({escape(saving)})</b>' if saving else ""
        items.append(f'<li><b style="color:{color}">{escape(f.severity)}</b> '
                     f'{escape(f.message)}{saving}{todo}</li>')
    more = (f"<li>... and {len(findings) - MAX_FINDINGS} more (Analysis.findings)</li>"
            if len(findings) > MAX_FINDINGS else "")
    return f"<h4>Findings</h4><ul>{''.join(items)}{more}</ul>"


def headline_html(a: Analysis) -> str:
    """The biggest win first, the verdict beside it, and the combined saving where savings
    share time (analyzers/report/headline.py)."""
    win, together = HL.win_text(a), HL.combined_text(a)
    out = (f'<p style="font-size:15px" class="biggest-win"><b>Biggest win:</b> {escape(win)}</p>'
           if win else "")
    out += f'<p style="font-size:15px"><b>{escape(HL.verdict_text(a))}</b></p>'
    if together:
        out += f'<p class="combined-saving"><i>{escape(together[0].upper() + together[1:])}.</i></p>'
    return out


def analysis_html(a: Analysis, heading: bool = True) -> str:
    """The verdict, the breakdown chart and the findings of ``a``; ``heading``: begin with
    a line naming the run (a page that has its own title leaves it out)."""
    run = a.run or {}
    head = ""
    if heading:
        world = run.get("world_size")
        head = (f"<b>profkit analysis</b> of <code>{escape(str(run.get('path', '')))}</code>: "
                f"{plural(world, 'rank') if isinstance(world, int) else '? ranks'}")
        status = run.get("status")
        if status and status != "ok":
            head += f', run status <b style="color:#B00020">{escape(str(status))}</b>'
    verdict = headline_html(a)
    memory, phases = memory_line(a), inference_line(a)
    if memory:
        verdict += f"<p><b>Memory:</b> {escape(memory)}</p>"
    if phases:
        verdict += f"<p><b>Inference:</b> {escape(phases)}</p>"
    return (f'<div style="{BOX}">{head}{verdict}'
            f'{breakdown_chart(a.verdict, a.table("rank_breakdown"))}'
            f'{findings_list(a.findings)}</div>')


def _delta_bars(parts: pd.DataFrame) -> str:
    """One bar per part (by its label), from the middle: longer means more ms per step
    changed; red slower, green faster."""
    from profkit.analyzers.parts import part_label
    from profkit.analyzers.report.diff_display import time_cell

    scale = max(float(parts["delta_ms"].abs().max()), 1e-9)
    rows = []
    for _, row in parts.iterrows():
        delta = float(row["delta_ms"])
        width = 50 * abs(delta) / scale
        side = "left:50%" if delta > 0 else f"left:{50 - width:.3f}%"
        color = "#D55E00" if delta > 0 else "#009E73"
        rows.append(
            f'<div style="display:flex;align-items:center;margin:2px 0">'
            f'<div style="width:130px">{escape(part_label(str(row["part"])))}</div>'
            f'<div style="position:relative;height:14px;flex:1;background:#f3f3f3">'
            f'<div style="position:absolute;{side};width:{width:.3f}%;height:14px;'
            f'background:{color}"></div></div>'
            f'<div style="width:150px;text-align:right">{time_cell(row["base_ms"])} &rarr; '
            f'{time_cell(row["new_ms"])} ms</div></div>')
    return "<h4>Where the step time changed (ms per step)</h4>" + "".join(rows)


def _table(headers: list[str], rows: list[list[str]], title: str) -> str:
    """A diff table of display strings (diff_display): the name left, numbers right."""
    align = ["left"] + ["right"] * (len(headers) - 1)
    head = "".join(f"<th style='text-align:{a}'>{escape(h)}</th>" for h, a in zip(headers, align))
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:{a}'>{escape(v[:70])}</td>"
                         for v, a in zip(row, align)) + "</tr>"
        for row in rows[:MAX_DIFF_ROWS])
    return f"<h4>{escape(title)}</h4><table><tr>{head}</tr>{body}</table>"


def diff_html(d: Diff) -> str:
    """The verdict of ``d``, what kind of change it was, the per-part change as bars, the
    kernel groups, kernels and ops that moved (as the text report shows them)."""
    from profkit.analyzers.report.diff_display import attribution_cells
    from profkit.analyzers.report.diff_text import TITLES, shown

    v = d.verdict
    parts = [f'<div style="{BOX}"><b>profkit diff</b> <code>{escape(str(d.base))}</code> '
             f'&rarr; <code>{escape(str(d.new))}</code>',
             f'<p style="font-size:15px"><b>{escape(v.get("summary", ""))}</b></p>']
    if v.get("memory"):
        parts.append(f'<p><b>Memory:</b> {escape(v["memory"]["text"])}</p>')
    if v.get("phases"):
        parts.append(f'<p><b>Inference:</b> {escape(v["phases"]["text"])}</p>')
    changes = v.get("changes") or []
    if changes:
        parts.append("<ul>" + "".join(f"<li>{escape(c)}</li>" for c in changes) + "</ul>")
    if "diff_parts" in d.tables and not d.tables["diff_parts"].empty:
        parts.append(_delta_bars(d.tables["diff_parts"]))
    for name in ("diff_kernel_groups", "diff_kernels", "diff_ops"):
        table = d.tables.get(name)
        if table is not None and not table.empty:
            table = shown(name, table)
            if not table.empty:
                parts.append(_table(*attribution_cells(name, table), TITLES[name]))
    return "".join(parts) + "</div>"
