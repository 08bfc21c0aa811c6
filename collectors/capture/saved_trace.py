"""Saving a profiler cycle's trace (:func:`export_trace`), and the profiler a user's
``on_trace_ready`` sees once profkit has saved it (:class:`SavedTraceView`).

Kineto saves a cycle's trace only once (torch 2.13 raises "Trace is already saved" on a
second ``export_chrome_trace``), so a user handler such as
``torch.profiler.tensorboard_trace_handler`` would crash the job after profkit's own
export. This view answers ``export_chrome_trace`` with a copy of the file profkit wrote
and passes everything else to the profiler.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
from pathlib import Path
from typing import Any

from profkit.collectors.capture.losses import MIN_RESERVE_BYTES
from profkit.collectors.run_dir_writes import gzip_file_atomic, tmp_name

from profkit.atomic import atomic_open


class SavedTraceView:
    """``prof`` whose ``export_chrome_trace(path, ...)`` copies ``saved`` (a gzip Kineto
    trace): gzip as is to a ``.gz`` path, decompressed to any other path."""

    def __init__(self, prof: Any, saved: Path):
        self._prof, self._saved = prof, Path(saved)

    def export_chrome_trace(self, path: str, *args: Any, **kwargs: Any) -> None:
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        opener = open if dest.name.endswith(".gz") else gzip.open
        with atomic_open(dest) as out, opener(self._saved, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prof, name)


def export_trace(prof: Any, dest: Path) -> Path:
    """Export the profiler's trace into ``dest`` (gzip, atomically). Kineto does not raise
    when its write fails (it logs "Failed to write to log file!" and leaves its own
    ``.tmp``): a missing or cut-off export is raised here as an OSError, and no temporary
    is left either way."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_name(dest, ".json")
    kineto_tmp = tmp.with_name(tmp.name + ".tmp")
    try:
        prof.export_chrome_trace(str(tmp))
        if not _complete_json(tmp):
            raise _export_error(dest)
        return gzip_file_atomic(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
        kineto_tmp.unlink(missing_ok=True)


def _complete_json(path: Path) -> bool:
    """Whether Kineto's export is there and ends as a JSON object does (not cut off)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(size - 64, 0))
            return fh.read().rstrip().endswith(b"}")
    except OSError:
        return False


def _export_error(dest: Path) -> OSError:
    try:
        full = shutil.disk_usage(dest.parent).free < MIN_RESERVE_BYTES
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
    return OSError(errno.EIO, "the profiler wrote no complete trace (Kineto's log says why)",
                   str(dest))
