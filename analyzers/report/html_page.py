"""``profkit analyze --format html``: one self-contained page for a pull request or CI
artefacts. The truth about the run first (status, ranks analysed, skipped files, notes),
then the verdict, the breakdown chart and the findings (the notebook view,
:func:`profkit.analyzers.report.html.analysis_html`), then the tables the findings cite. Inline
styles only: no script, no stylesheet, font or image from a URL."""

from __future__ import annotations

from html import escape

from profkit.analyzers.analyze import Analysis
from profkit.analyzers.findings.diagnosis import steps_line
from profkit.analyzers.report import header as H
from profkit.analyzers.report.html import BOX, analysis_html, diff_html
from profkit.analyzers.report.sections import sections

H1 = "font-size:20px;margin:0 0 8px"
PAGE_STYLE = ("body{margin:24px;color:#222}table{border-collapse:collapse;margin:4px 0 16px}"
              "th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;"
              "font-size:12px}th{background:#f4f4f4}td:first-child,th:first-child{text-align:"
              "left}.note{color:#555;font-size:12px}.status{color:#B00020;font-weight:bold}")


def to_html(a: Analysis) -> str:
    """The page: its title first (``<h1>``), the truth about the run, the verdict, chart and
    findings, then the tables."""
    run = a.run or {}
    title = f"profkit analysis of {run.get('path', '')}"
    body = [f'<div style="{BOX}"><h1 style="{H1}">{escape(title)}</h1>', _header(run), "</div>",
            analysis_html(a, heading=False)]
    body += [f'<div style="{BOX}">' + _section(s) + "</div>" for s in sections(a)]
    return _page(title, body)


def diff_page(d) -> str:
    """``profkit diff --format html``: the diff's notebook view as a page of its own."""
    title = f"profkit diff: {d.base} -> {d.new}"
    return _page(title, [f'<div style="{BOX}"><h1 style="{H1}">{escape(title)}</h1></div>',
                         diff_html(d)])


def _page(title: str, body: list[str]) -> str:
    head = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{PAGE_STYLE}</style></head><body>")
    return "\n".join([head, *body, "</body></html>"]) + "\n"


def _header(run: dict) -> str:
    lines = []
    status = H.status_line(run)
    if status:
        lines.append(f'<p class="status">RUN STATUS: {escape(status)}</p>')
    lines.append(f"<p>{escape(H.ranks_line(run))}</p>")
    if run.get("steps"):
        lines.append(f"<p>Steps used: {escape(steps_line(run['steps']))}</p>")
    items = [f"skipped: {s}" for s in H.skipped_lines(run)] + H.note_lines(run)
    if items:
        lines.append('<ul class="note">' + "".join(f"<li>{escape(i)}</li>" for i in items)
                     + "</ul>")
    return "".join(lines)


def _section(section) -> str:
    head = "".join(f"<th>{escape(str(c))}</th>" for c in section.table.columns)
    rows = "".join("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in section.table.itertuples(index=False))
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in section.notes)
    return (f"<h3>{escape(section.title)}</h3><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>{notes}")
