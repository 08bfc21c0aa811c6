"""Atomic file writes (temp name in the same folder + rename) and output-dir checks.

A reader of the run directory never sees half a file: every writer here goes through a
temporary name that starts with ``.tmp-`` and is renamed into place (see
:mod:`profkit.atomic`, which also removes what killed writers left behind). Files are
created with the umask's mode, as ``open()`` creates them.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

from profkit.collectors.collector_errors import OutputDirError

from profkit.atomic import TMP_PREFIX, atomic_open, sweep_stale, tmp_name, write_bytes_atomic

__all__ = ["TMP_PREFIX", "check_output_dir", "gzip_file_atomic", "sweep_run_dir", "tmp_name",
           "write_bytes_atomic", "write_json_atomic"]

# Below this much free space the capture refuses to start (bytes).
DEFAULT_MIN_FREE_BYTES = 256 * 1024 * 1024


def write_json_atomic(dest: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as indented JSON (non-serialisable values become ``str``)."""
    text = json.dumps(obj, indent=1, sort_keys=True, default=str)
    return write_bytes_atomic(dest, text.encode())


def gzip_file_atomic(src: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Gzip ``src`` into ``dest`` atomically and delete ``src``, also when that fails: ``src``
    is a temporary that no reader takes, and on a full disk its space is needed."""
    src, dest = Path(src), Path(dest)
    try:
        with atomic_open(dest) as raw, open(src, "rb") as fin, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    finally:
        src.unlink(missing_ok=True)
    return dest


def sweep_run_dir(path: str | os.PathLike) -> int:
    """Remove temporaries that killed writers left in a run directory and its folders
    (``traces/``, ``nvml/``, ...; see :func:`profkit.atomic.is_stale`); returns how many."""
    path = Path(path)
    removed = sweep_stale(path)
    try:
        folders = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return removed
    return removed + sum(sweep_stale(folder) for folder in folders)


def check_output_dir(path: str | os.PathLike, min_free_bytes: int = DEFAULT_MIN_FREE_BYTES) -> Path:
    """Create ``path`` if needed and check it is writable with ``min_free_bytes`` free.

    Raises :class:`OutputDirError` naming the directory and the problem.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputDirError(str(path), f"cannot create run directory ({e.strerror or e})") from e
    if not path.is_dir():
        raise OutputDirError(str(path), "exists and is not a directory")
    sweep_run_dir(path)
    probe = tmp_name(path / "probe")
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OutputDirError(str(path), f"run directory is not writable ({e.strerror or e})") from e
    free = shutil.disk_usage(path).free
    if free < min_free_bytes:
        raise OutputDirError(
            str(path),
            f"only {free / 2**20:.0f} MiB free, need at least {min_free_bytes / 2**20:.0f} MiB "
            "for traces (pass min_free_bytes= to lower the limit)",
        )
    return path
