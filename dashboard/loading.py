"""Reading a run for the dashboard so that one bad rank costs that rank, never the page.

The loader already skips a file it cannot read (``Run.skipped``). What it lets through can
still break the analysis: a malformed value in one rank's trace (a rank number no int64
holds, ...). Then each rank is analysed alone and the ranks whose analysis fails are set
aside as skipped files with the cause, so the others are still shown. When the run cannot
be read at all, the error names the trace file that fails and why.

What the pages show without the events (the analysis, the Runs table's facts, the ranks set
aside) is a :class:`Shown`, which :mod:`profkit.datacodec` can keep on disk; the events are
read again only for the pages that draw them (:func:`reload`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from profkit.analyzers.analyze import Analysis

from profkit import datacodec
from profkit.errors import ProfkitError
from profkit.model import Run, SkippedFile
from profkit.run import loader

log = logging.getLogger(__name__)
MAX_CAUSE_CHARS = 300
NO_GPU = "no GPU events"


@datacodec.register
@dataclasses.dataclass
class Shown:
    """A run as the pages show it without its events: its analysis, the facts of the Runs
    table (:func:`run_facts`) and the ranks set aside because their analysis failed
    (rank -> the skipped-file reason), so that :func:`reload` sets the same ones aside."""

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


def show(path: Path) -> tuple[Run, Shown] | RunReadError:
    """``(run, shown)`` of the run at ``path`` (see :func:`load`), or its RunReadError."""
    value = load(path)
    if isinstance(value, RunReadError):
        return value
    run, analysis = value
    return run, Shown(analysis, run_facts(run), set_aside_ranks(run))


def reload(path: Path, set_aside: dict[int, str]) -> Run | RunReadError:
    """The run at ``path`` with its events, the ranks ``set_aside`` when it was shown set
    aside again (each listed as a skipped file with its reason)."""
    run = _read(path)
    if isinstance(run, RunReadError) or not set_aside:
        return run
    return _without(run, {r: why for r, why in set_aside.items() if r in run.ranks})


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


def run_facts(run: Run) -> dict[str, Any]:
    """What the Runs table says of a run beside its analysis: the GPU of each analysed
    rank, the capture date and the time origin of its charts (the timeline's)."""
    from profkit.dashboard.page_timeline import base_ns  # a page module: imported late

    return {"gpus": gpu_names(run), "date": capture_date(run), "origin_ns": base_ns(run)}


def gpu_names(run: Run) -> str:
    """``2 x NVIDIA H200``: the GPU each analysed rank ran on, counted (run.json lists
    every GPU of the host, also those no rank used)."""
    names = Counter(_rank_gpu(data) for data in run.ranks.values())
    return ", ".join(f"{n} x {name}" for name, n in names.items()) or "-"


def _rank_gpu(data) -> str:
    used = data.events.loc[data.events["device"] >= 0, "device"]
    if not len(used):
        return NO_GPU
    devices = data.meta.get("devices") or []
    device = next((d for d in devices if d.get("id") == int(used.iloc[0])), None)
    return str((device or {}).get("name") or f"GPU {int(used.iloc[0])}")


def capture_date(run: Run) -> str:
    started = run.meta.get("started_ns")
    if not started:
        starts = [int(d.steps["ts_ns"].min()) for d in run.ranks.values() if len(d.steps)]
        started = min(starts) if starts else None
    if not started:
        return "-"
    return datetime.fromtimestamp(started / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")



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
