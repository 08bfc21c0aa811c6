"""Reading a run for the dashboard so that one bad rank costs that rank, never the page.

The loader already skips a file it cannot read (``Run.skipped``). What it lets through can
still break the analysis: a malformed value in one rank's trace (a rank number no int64
holds, ...). Then each rank is analysed alone and the ranks whose analysis fails are set
aside as skipped files with the cause, so the others are still shown. When the run cannot
be read at all, the error names the trace file that fails and why.

The analysis is ``profkit analyze``'s (:func:`show`: map/reduce over a process pool); the run is
read whole with its events only for the pages that draw them (:func:`reload`, from the ingest
cache the analysis wrote) and, in one process, when the analysis itself fails (:func:`load`).
What the pages show without the events (the analysis, the Runs table's facts, the ranks set
aside) is a :class:`Shown`, which :mod:`profkit.datacodec` can keep on disk.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from profkit.analyzers.analyze import Analysis
from profkit.dashboard.server import runfacts

from profkit import datacodec
from profkit.errors import ProfkitError
from profkit.model import Run, SkippedFile
from profkit.run import loader

log = logging.getLogger(__name__)
MAX_CAUSE_CHARS = 300


@datacodec.register
@dataclasses.dataclass
class Shown:
    """A run as the pages show it without its events: its analysis, the facts of the Runs
    table (:func:`profkit.dashboard.server.runfacts.facts`) and the ranks set aside because their
    analysis in this process failed (rank -> the skipped-file reason; :func:`load`)."""

    analysis: Analysis
    facts: dict[str, Any]
    set_aside: dict[int, str] = dataclasses.field(default_factory=dict)

    def valid(self) -> bool:
        """Whether a value decoded from a cache file has the shape this code writes."""
        return (isinstance(self.analysis, Analysis) and isinstance(self.analysis.run, dict)
                and isinstance(self.facts, dict) and isinstance(self.set_aside, dict)
                and all(isinstance(r, int) and isinstance(w, str)
                        for r, w in self.set_aside.items()))


@dataclasses.dataclass(frozen=True)
class Summary:
    """What the Runs table shows of a run (small: kept for every run, while the analyses
    themselves are evicted from memory): its ``run`` record, verdict, stragglers and facts."""

    run: dict[str, Any]
    verdict: dict[str, Any]
    stragglers: list
    facts: dict[str, Any]

    @classmethod
    def of(cls, shown: Shown) -> Summary:
        a = shown.analysis
        return cls(a.run, a.verdict, list(a.stragglers), shown.facts)


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
    run = _read(path)
    if isinstance(run, RunReadError):
        return run
    from profkit.analyzers.analyze import analyze

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


def show(path: Path) -> Shown | RunReadError:
    """What the pages show of the run at ``path`` without its events: its analysis as
    ``profkit analyze`` makes it (:func:`~profkit.analyzers.executor.analyze_run`: each
    rank summarised in a pool of processes, its ingest cache written for the pages that
    read the events later; a rank it cannot read or summarise is a skipped file with the
    cause) and the Runs table's facts (:mod:`~profkit.dashboard.server.runfacts`). When the
    analysis itself fails, the run is read whole and each rank analysed alone
    (:func:`load`), so that one bad rank costs that rank only."""
    from profkit.analyzers.executor import analyze_run

    try:
        analysis, set_aside = analyze_run(path, cache=True), {}
    except (ProfkitError, OSError) as exc:
        return RunReadError(str(exc))
    except Exception as exc:  # a malformed value that breaks the reduce: rank by rank
        log.warning("%s: analysis failed (%s); reading the run whole", path, describe(exc))
        value = load(path)
        if isinstance(value, RunReadError):
            return value
        run, analysis = value
        set_aside = set_aside_ranks(run)
    return Shown(analysis, runfacts.facts(analysis, path), set_aside)


NOT_ANALYSED = "rank not analysed"


def reload(path: Path, shown: Shown) -> Run | RunReadError:
    """The run at ``path`` with its events (from the ingest cache its analysis wrote), with
    the ranks of its analysis only: the others (set aside, or a rank whose summary failed)
    are listed as skipped files with their reason, as the analysis lists them."""
    run = _read(path)
    if isinstance(run, RunReadError):
        return run
    analysed = set(shown.analysis.run.get("ranks_analyzed") or [])
    extra = [r for r in run.rank_ids if r not in analysed]
    if not extra or len(extra) == len(run.ranks):
        return run
    reasons = {str(s.get("path")): str(s.get("reason"))
               for s in shown.analysis.run.get("skipped_files") or [] if isinstance(s, dict)}
    return _without(run, {r: shown.set_aside.get(r) or reasons.get(str(run.ranks[r].path))
                          or NOT_ANALYSED for r in extra})


def _read(path: Path) -> Run | RunReadError:
    try:
        return loader.load_run(path)
    except (ProfkitError, OSError) as exc:
        return RunReadError(str(exc))
    except Exception as exc:  # a malformed value the loader lets escape
        log.warning("%s: could not be read (%s)", path, describe(exc))
        return RunReadError(unreadable_message(path, exc))


SET_ASIDE = "rank could not be analysed ({})"


def without_failing_ranks(run: Run, analyze) -> Run:
    """``run`` without the ranks whose analysis fails on their own, each listed as a
    skipped file with the cause."""
    failing = {}
    for rank in run.rank_ids:
        try:
            analyze(dataclasses.replace(run, ranks={rank: run.ranks[rank]}))
        except Exception as exc:  # whatever it is, it costs this rank only
            failing[rank] = SET_ASIDE.format(describe(exc))
    if not failing or len(failing) == len(run.ranks):
        return run
    return _without(run, failing)


def _without(run: Run, reasons: dict[int, str]) -> Run:
    skipped = list(run.skipped) + [SkippedFile(run.ranks[r].path, why)
                                   for r, why in reasons.items()]
    kept = {r: d for r, d in run.ranks.items() if r not in reasons}
    meta = {**run.meta, "set_aside": dict(reasons)}
    return dataclasses.replace(run, ranks=kept, skipped=skipped, meta=meta)


def set_aside_ranks(run: Run) -> dict[int, str]:
    """The ranks :func:`without_failing_ranks` set aside, with their reasons."""
    return {int(r): str(why) for r, why in (run.meta.get("set_aside") or {}).items()}


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
