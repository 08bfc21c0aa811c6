"""Reading a run for the dashboard so that one bad rank costs that rank, never the page.

The loader already skips a file it cannot read (``Run.skipped``). What it lets through can
still break the analysis: a malformed value in one rank's trace (a rank number no int64
holds, ...). Then each rank is analysed alone and the ranks whose analysis fails are set
aside as skipped files with the cause, so the others are still shown. When the run cannot
be read at all, the error names the trace file that fails and why.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from profkit import loader
from profkit.errors import ProfkitError
from profkit.model import Run, SkippedFile

log = logging.getLogger(__name__)
MAX_CAUSE_CHARS = 300


class RunReadError(ProfkitError):
    """A run the dashboard can show nothing of: its message names the files and causes."""


def describe(exc: BaseException) -> str:
    """One short line naming an exception's type and message."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= MAX_CAUSE_CHARS else text[: MAX_CAUSE_CHARS - 3] + "..."


def load(path: Path):
    """``(run, analysis)`` of the run at ``path``, ranks whose analysis fails set aside; a
    :class:`RunReadError` (returned, so that the failure is cached like a result) when
    nothing of it can be shown."""
    from profkit.analyzers.analyze import analyze

    try:
        run = loader.load_run(path)
    except (ProfkitError, OSError) as exc:
        return RunReadError(str(exc))
    except Exception as exc:  # a malformed value the loader lets escape
        log.warning("%s: could not be read (%s)", path, describe(exc))
        return RunReadError(unreadable_message(path, exc))
    try:
        return run, analyze(run)
    except Exception as exc:  # one bad rank must not cost the others
        log.warning("%s: analysis failed (%s); analysing each rank alone", path, describe(exc))
    run = without_failing_ranks(run, analyze)
    try:
        return run, analyze(run)
    except Exception as exc:
        log.warning("%s: analysis failed (%s)", path, describe(exc))
        return RunReadError(f"{path}: could not be analysed ({describe(exc)})")


def without_failing_ranks(run: Run, analyze) -> Run:
    """``run`` without the ranks whose analysis fails on their own, each listed as a
    skipped file with the cause."""
    failing = {}
    for rank in run.rank_ids:
        try:
            analyze(dataclasses.replace(run, ranks={rank: run.ranks[rank]}))
        except Exception as exc:  # whatever it is, it costs this rank only
            failing[rank] = describe(exc)
    if not failing or len(failing) == len(run.ranks):
        return run
    skipped = list(run.skipped) + [
        SkippedFile(run.ranks[r].path, f"rank could not be analysed ({why})")
        for r, why in failing.items()]
    kept = {r: d for r, d in run.ranks.items() if r not in failing}
    return dataclasses.replace(run, ranks=kept, skipped=skipped)


def unreadable_message(path: Path, exc: Exception) -> str:
    """What failed when the loader raised an unexpected error: each trace file is read on
    its own to name the one(s) at fault."""
    bad = []
    try:
        files = loader.open_run(path)[3]
    except (ProfkitError, OSError):
        files = []
    for f in files:
        try:
            loader.ingest_file(str(f))
        except Exception as file_exc:  # naming the file is the point
            bad.append(f"{f}: {describe(file_exc)}")
    detail = "; ".join(bad) if bad else describe(exc)
    return f"{path}: could not be read ({detail})"
