"""The truth about a run, on every one of its pages and in its row of the Runs table: how it
ended, how many of its ranks were analysed, which files were skipped and why, and the notes
on how it was read. The words are the report header's (:mod:`profkit.analyzers.report.header`), so
the dashboard and ``profkit analyze`` say the same thing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dash import html
from profkit.analyzers.measure.coverage import ended_badly, missing_ranks
from profkit.analyzers.report import header as H
from profkit.dashboard import ids

PROBLEM, INFO = "problem", "info"
PARTIAL = ("The verdict, findings and tables are about the analysed ranks only: what the "
           "missing ranks did (a straggler among them, their waits) is not seen.")


def level(info: dict[str, Any]) -> str | None:
    """PROBLEM when the run is not all there (what ``profkit analyze --strict`` fails on),
    INFO when it is but something was skipped or noted, None when there is nothing to say."""
    if H.problems(info):
        return PROBLEM
    if info.get("skipped_files") or info.get("notes"):
        return INFO
    return None


def run_banner(info: dict[str, Any]) -> html.Div | None:
    """The banner of a run's pages (``info``: the analysis' ``run``); nothing for a complete
    run read without notes."""
    kind = level(info)
    if kind is None:
        return None
    status = H.status_line(info)
    skipped = H.skipped_lines(_relative(info))
    notes = [for_dashboard(n) for n in H.note_lines(info)]
    return html.Div(id=ids.RUN_NOTE, className=f"card banner banner-{kind}", role="status",
                    children=[
        html.Strong(f"Run {status}", className="banner-status") if status else None,
        html.Div(H.ranks_line(info), className="banner-ranks"),
        html.P(PARTIAL, className="banner-why") if H.missing_ranks(info) else None,
        _listing(f"{len(info.get('skipped_files') or [])} file(s) skipped", skipped, "skipped"),
        _listing("notes", notes, "notes"),
    ])


# the CLI's advice, as the dashboard must put it: it has no --step-marker option itself
CLI_STEP_MARKER = "pass --step-marker NAME to use a range you record per step"
DASHBOARD_STEP_MARKER = ("to use a range you record per step, run: profkit analyze RUN "
                         "--step-marker NAME (the dashboard itself has no such option and "
                         "reads the steps as recorded)")


def for_dashboard(note: str) -> str:
    """A note of the analysis as the dashboard says it: advice to pass a CLI option the
    dashboard lacks names the command that takes it."""
    return note.replace(CLI_STEP_MARKER, DASHBOARD_STEP_MARKER)


def _listing(title: str, lines: list[str], class_name: str) -> html.Details | None:
    if not lines:
        return None
    return html.Details(open=True, className=f"banner-{class_name}", children=[
        html.Summary(title), html.Ul([html.Li(line) for line in lines])])


def _relative(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` with skipped paths relative to the run folder where they lie inside it."""
    root = info.get("path")
    return {**info, "skipped_files": [{**s, "path": _inside(str(s.get("path", "")), root)}
                                      for s in info.get("skipped_files") or []]}


def _inside(path: str, root: str | None) -> str:
    try:
        return str(Path(path).relative_to(root)) if root else path
    except ValueError:
        return path


def ranks_text(info: dict[str, Any]) -> str:
    """The Runs table's ranks cell: ``2``, or ``1 of 2`` when ranks are missing."""
    analysed = len(info.get("ranks_analyzed") or [])
    world = max(int(info.get("world_size") or 0), analysed)
    return str(world) if analysed >= world else f"{analysed} of {world}"


def status_text(info: dict[str, Any]) -> str | None:
    """The Runs table's status pill: the run's status when it did not end well, else
    "incomplete" when ranks of its world are missing; None for a run with every rank. Files
    skipped and notes are not a status: :func:`notes_text` says them."""
    if ended_badly(info):
        return str(info["status"])
    return "incomplete" if missing_ranks(info) else None


def notes_text(info: dict[str, Any]) -> str | None:
    """``2 files skipped``, ``1 file skipped, 1 rank numbered by file order``: what was set
    aside or guessed while the run was read, for the Runs table (the lines:
    :func:`notes_title`; the other notes, on how the steps were chosen, are the banner's).
    None when there is nothing of the kind."""
    skipped, guessed = len(info.get("skipped_files") or []), len(_guessed(info))
    parts = [f"{skipped} file{'s' * (skipped > 1)} skipped"] if skipped else []
    parts += [f"{guessed} rank{'s' * (guessed > 1)} numbered by file order"] if guessed else []
    return ", ".join(parts) or None


def notes_title(info: dict[str, Any]) -> str:
    """The skipped files (relative to the run folder, with their reasons) and the ranks
    numbered by file order, one per line: the hover text of :func:`notes_text`."""
    return "\n".join(H.skipped_lines(_relative(info)) + _guessed(info))


def _guessed(info: dict[str, Any]) -> list[str]:
    return [str(n) for n in info.get("notes") or [] if str(n).endswith(H.GUESSED_RANK)]


def problems_title(info: dict[str, Any]) -> str:
    """The problems, one per line: the pill's hover text."""
    return "\n".join(H.problems(info))
