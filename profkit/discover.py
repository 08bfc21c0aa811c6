"""Finding the trace files of a run and the rank of each."""

from __future__ import annotations

import re
from pathlib import Path

from profkit.model import SkippedFile
from profkit.validate import MAX_RANKS

RUN_JSON = "run.json"
TRACE_SUFFIXES = (".json", ".json.gz")
# Folders a profkit run directory keeps non-trace data in (``analysis``: the in-job report
# of ``profile(summarize=True)``), and the cache.
QUIET_DIRS = {"nvml", "nccl", "ranks", "profkit-report", ".profkit", "__pycache__"}
CAPTURE_PREFIX = "capture-"  # on-demand captures: complete run directories of their own
MAX_DEPTH = 3
_RANK_RE = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)", re.IGNORECASE)


def run_folder(root: Path) -> Path:
    """The folder holding a run's run.json, NVML samples and rank status: the run path
    itself, or a single trace file's folder."""
    return root if root.is_dir() else root.parent


def is_trace_name(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith(TRACE_SUFFIXES) and name != RUN_JSON


def rank_from_name(path: str | Path) -> int | None:
    """Rank from a file name such as ``rank3.json``, ``rank-3.json.gz`` or
    ``rank_3.<worker>.pt.trace.json``; None if the name carries none."""
    match = _RANK_RE.search(Path(path).name)
    rank = int(match.group(1)) if match and len(match.group(1)) < 10 else None
    return rank if rank is not None and rank < MAX_RANKS else None  # else a number, no rank


def find_trace_files(path: Path) -> tuple[list[Path], list[SkippedFile]]:
    """Trace files under ``path`` (a file, or a folder searched a few levels deep) and the
    other files found there, which are skipped with a note."""
    if path.is_file():
        return [path], []
    traces: list[Path] = []
    skipped: list[SkippedFile] = []
    for item in _walk(path, 0):
        if item.is_dir():
            skipped.append(SkippedFile(str(item), "on-demand capture: a run of its own, load it separately"))
        elif is_trace_name(item):
            traces.append(item)
        elif item.name != RUN_JSON and not item.name.startswith("."):
            skipped.append(SkippedFile(str(item), "not a trace file (expected .json or .json.gz)"))
    return sorted(traces, key=_natural_key), skipped


def _walk(folder: Path, depth: int):
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and entry.name.startswith(CAPTURE_PREFIX) and (entry / RUN_JSON).exists():
            yield entry
        elif entry.is_dir():
            if depth + 1 < MAX_DEPTH and entry.name not in QUIET_DIRS and not entry.name.startswith("."):
                yield from _walk(entry, depth + 1)
        elif entry.is_file() and entry.parent.name not in QUIET_DIRS:
            yield entry


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]
