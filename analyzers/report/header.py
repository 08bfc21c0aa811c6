"""The truth about a run, said before any verdict: whether it ended well, how many of its
ranks were analysed, which files were skipped and why, and the notes on how it was read.

:func:`problems` is what ``profkit analyze --strict`` fails on:

- a run that did not end well: status ``failed``, ``incomplete`` or ``running`` (run.json
  and ``ranks/rank{R}.json``);
- missing ranks: fewer ranks analysed than the world size (ranks left out with ``--ranks``
  are not missing);
- skipped files that could have held a rank's trace: any but files that are not traces by
  name (a README), the sidecars of a profkit run (``ranks/``, ``nvml/``, ``nccl/``: a bad
  one is listed, never counted), profkit's own merged output and a second name of a file
  already read;
- ranks whose number was guessed from file order (no rank in the trace or its name).

Other notes (cycles joined, steps left out, no ProfilerStep ranges) describe how a complete
run was read and do not count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profkit.analyzers.measure.coverage import BAD_STATUS, missing_ranks
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.units import clip

from profkit.run.discover import QUIET_DIRS as SIDECAR_DIRS
from profkit.run.discover import is_trace_name
from profkit.run.loader import MERGED_OUTPUT
from profkit.textout import plural, ranks_text

MAX_STATUS_RANKS = 3  # the status line names this many failed ranks, then counts the rest
MAX_SKIPPED_SHOWN = 10  # text and Markdown list this many skipped files, then count the rest
MAX_NOTES_SHOWN = 10
GUESSED_RANK = "by file order"  # the end of the loader's note for a rank taken from file order


def status_line(run: dict[str, Any]) -> str | None:
    """``failed (rank 1: RuntimeError: boom)`` when the run did not end well, else None:
    the first thing a reader of a failed run's report must see."""
    status = run.get("status")
    if status in (None, "ok"):
        return None
    errors = sorted((run.get("rank_errors") or {}).items(), key=lambda kv: _rank_key(kv[0]))
    shown = [f"rank {r}: {clip(why, 160)}" for r, why in errors[:MAX_STATUS_RANKS]]
    if len(errors) > MAX_STATUS_RANKS:
        shown.append(f"{plural(len(errors) - MAX_STATUS_RANKS, 'more rank', 'more ranks')}")
    return f"{status} ({'; '.join(shown)})" if shown else str(status)


def _rank_key(rank: Any) -> tuple[int, str]:
    return (int(rank), "") if str(rank).isdigit() else (1 << 62, str(rank))


def ranks_line(run: dict[str, Any]) -> str:
    """``2 of 2 ranks analysed``; ``1 of 8 ranks analysed: 7 missing (1-7)``."""
    analysed = len(run.get("ranks_analyzed") or [])
    world = max(int(run.get("world_size") or 0), analysed)
    text = f"{analysed} of {plural(world, 'rank')} analysed"
    selected = run.get("ranks_selected")
    if selected is not None:
        text += f" ({clip(ranks_text(selected), 86)} asked for)"
    missing = missing_ranks(run)
    if missing:
        text += f": {len(missing)} missing ({clip(rank_ranges(missing), 80)})"
    return text


def skipped_lines(run: dict[str, Any], path=str) -> list[str]:
    """``path: reason`` per skipped file, the first :data:`MAX_SKIPPED_SHOWN` of them;
    ``path`` formats the path (the text report keeps it on one line)."""
    skipped = run.get("skipped_files") or []
    lines = [f"{path(str(s['path']))}: {clip(s['reason'], 200)}"
             for s in skipped[:MAX_SKIPPED_SHOWN]]
    if len(skipped) > MAX_SKIPPED_SHOWN:
        lines.append(f"... and {len(skipped) - MAX_SKIPPED_SHOWN} more (all in --format json)")
    return lines


def note_lines(run: dict[str, Any]) -> list[str]:
    notes = run.get("notes") or []
    lines = [clip(n, 300) for n in notes[:MAX_NOTES_SHOWN]]
    if len(notes) > MAX_NOTES_SHOWN:
        lines.append(f"... and {len(notes) - MAX_NOTES_SHOWN} more (all in --format json)")
    return lines


def counts_against(skipped: dict[str, str]) -> bool:
    """Whether a skipped file may have been a rank's trace (see the module doc)."""
    reason = str(skipped.get("reason", ""))
    if reason.startswith("cannot list this folder"):
        return True  # traces may lie in it
    path = Path(str(skipped.get("path", "")))
    if not is_trace_name(path) or path.parent.name in SIDECAR_DIRS:
        return False  # a README; a rank status file, NVML chunk or NCCL dump (not a trace)
    return reason != MERGED_OUTPUT and not reason.startswith("the same file as")


def problems(run: dict[str, Any]) -> list[str]:
    """Why ``--strict`` fails on this run (see the module doc); empty when it does not."""
    out = []
    if run.get("status") in BAD_STATUS:
        out.append(f"run status {status_line(run)}")
    missing = missing_ranks(run)
    if missing:
        out.append(f"{len(missing)} of {run.get('world_size')} ranks missing "
                   f"({clip(rank_ranges(missing), 80)})")
    bad = [s for s in run.get("skipped_files") or [] if counts_against(s)]
    if bad:
        out.append(f"{plural(len(bad), 'trace file')} skipped (first: {bad[0]['path']})")
    guessed = [n for n in run.get("notes") or [] if str(n).endswith(GUESSED_RANK)]
    if guessed:
        out.append(f"{plural(len(guessed), 'rank')} numbered by file order, not by the trace")
    return out


def json_header(run: dict[str, Any]) -> dict[str, Any]:
    """``run`` for the JSON report: the truth first (status, ranks, skipped files, notes,
    the problems ``--strict`` fails on), then the rest as it was."""
    first = {"path": run.get("path"), "status": run.get("status"),
             "world_size": run.get("world_size"), "ranks_analyzed": run.get("ranks_analyzed"),
             "ranks_missing": missing_ranks(run), "skipped_files": run.get("skipped_files"),
             "notes": run.get("notes"), "problems": problems(run)}
    return {**first, **{k: v for k, v in run.items() if k not in first}}
