"""Parquet cache of ingested tables, keyed by the trace's path, size and mtime, and the
analysis result cache, keyed by every file of the run.

The cache lives in ``<run dir>/.profkit/cache`` when that folder is writable, else in
``$PROFKIT_CACHE_DIR`` or ``~/.cache/profkit``. Each entry is written to temporary names
and committed by renaming its ``.meta.json`` last, so a half-written entry is never read.
The folder may sit on shared storage that others can write, so everything in it is read as
data (Parquet, JSON, :mod:`profkit.datacodec`), never unpickled, and an entry that does not
decode is a miss. Temporaries that killed writers left are removed once per process.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from profkit import schema as S
from profkit.atomic import TMP_PREFIX, atomic_open, sweep_stale, write_bytes_atomic
from profkit.classify.rules import rules_fingerprint

if TYPE_CHECKING:
    import pandas as pd

# pandas and profkit.datacodec's tables are imported where tables are read: a cached report
# (load_report) needs neither, and their import is most of a cached command's time.

log = logging.getLogger(__name__)
RESULT_NAME = "result-{key}.data"
REPORT_NAME = "report-{key}.json"
TABLES = tuple(t.name for t in S.RANK_TABLES if t.cached)  # one Parquet file each
_swept: set[Path] = set()  # cache folders this process already cleaned


def cache_key(trace: Path) -> str:
    st = trace.stat()
    text = f"{trace.resolve()}|{st.st_size}|{st.st_mtime_ns}|v{S.TABLES_VERSION}{rules_fingerprint()}"
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def cache_dir_for(trace: Path) -> Path:
    """The first usable cache folder for this trace."""
    return _folder_for(trace.parent.parent if trace.parent.name == "traces" else trace.parent)


def _folder_for(run_dir: Path) -> Path:
    """``run_dir/.profkit/cache`` when writable, else the user's cache folder."""
    local = run_dir / ".profkit" / "cache"
    folder = local if _writable(local) else \
        Path(os.environ.get("PROFKIT_CACHE_DIR") or Path.home() / ".cache" / "profkit")
    if folder not in _swept:  # once, not per entry: a large run's cache holds many files
        _swept.add(folder)
        sweep_stale(folder)
    return folder


def sweep_temporaries(traces: list[str]) -> None:
    """Remove the temporaries that killed writers (a pool's workers stopped by Ctrl-C) left
    in these traces' cache folders."""
    for folder in {cache_dir_for(Path(t)) for t in traces}:
        sweep_stale(folder)


def _writable(folder: Path) -> bool:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def load(trace: Path) -> tuple[dict[str, pd.DataFrame], dict] | None:
    """Cached (tables, meta) for this trace, or None when absent, stale or unreadable."""
    try:
        key = cache_key(trace)
        folder = cache_dir_for(trace)
        meta_path = folder / f"{key}.meta.json"
        if not meta_path.exists():
            return None
        meta = orjson.loads(meta_path.read_bytes())
        import pandas as pd

        tables = {name: pd.read_parquet(folder / f"{key}.{name}.parquet") for name in TABLES}
    except (OSError, ValueError) as exc:
        log.debug("cache miss for %s: %s", trace, exc)
        return None
    if any(not set(t.columns) <= set(tables[t.name].columns)
           for t in S.RANK_TABLES if t.cached):
        # written by another build of the same tables version (two checkouts, one cache)
        log.debug("cache miss for %s: columns of another build", trace)
        return None
    return tables, meta


def store(trace: Path, tables: dict[str, pd.DataFrame], meta: dict) -> None:
    """Write one cache entry; failures only cost the next open its speed."""
    try:
        key = cache_key(trace)
        folder = cache_dir_for(trace)
        folder.mkdir(parents=True, exist_ok=True)
        for name in TABLES:
            target = folder / f"{key}.{name}.parquet"
            with atomic_open(target, sweep=False) as fh:
                tables[name].to_parquet(fh, index=False)
        write_bytes_atomic(folder / f"{key}.meta.json", orjson.dumps(meta, default=str), sweep=False)
    except (OSError, ValueError, TypeError) as exc:
        log.warning("could not cache %s: %s", trace, exc)


def run_fingerprint(path: Path, extra: str = "") -> str:
    """A key that changes whenever any file of the run changes (path, size, mtime of every
    file under it, the cache folder and files being written excluded), plus ``extra``
    (versions, options)."""
    path = Path(path).resolve()
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith(TMP_PREFIX)
        and ".profkit" not in p.relative_to(path).parts)
    return _files_key(hashlib.sha1(f"{path}|v{S.TABLES_VERSION}|{extra}".encode()), files)


def code_fingerprint(*packages: Path) -> str:
    """A key that changes whenever the source of these package folders does: the path,
    size and mtime of every ``.py`` file under them. Compiled bytecode is left out: Python
    writes it as each module is first imported, which must not make every cached result
    stale."""
    return _files_key(hashlib.sha1(), [f for folder in packages
                                       for f in sorted(Path(folder).resolve().rglob("*.py"))])


def _files_key(h, files: list[Path]) -> str:
    """``h`` updated with the path, size and mtime of each file, as a 24-digit key."""
    for f in files:
        st = f.stat()
        h.update(f"{f}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def _results_dir(path: Path) -> Path:
    path = Path(path)
    return _folder_for(path if path.is_dir() else path.parent)  # profkit.run.discover.run_folder


def load_result(path: Path, key: str, expect: type):
    """The result of type ``expect`` cached for this run under ``key``, or None. Whatever
    the file holds is decoded as data (:mod:`profkit.datacodec`), so a forged entry cannot
    run code; one that is corrupt, forged or of another type is a miss."""
    target = _results_dir(path) / RESULT_NAME.format(key=key)
    try:
        data = target.read_bytes()
    except OSError:
        return None
    from profkit import datacodec

    try:
        result = datacodec.decode(data)
    except Exception as exc:  # noqa: BLE001 - bytes anyone may have written: never an error
        log.debug("cached result %s unusable, analysing again: %s", target, exc)
        return None
    if not isinstance(result, expect):
        log.debug("cached result %s holds a %s, not a %s: analysing again", target,
                  type(result).__name__, expect.__name__)
        return None
    return result


def store_result(path: Path, key: str, result) -> None:
    """Cache ``result`` (a value :func:`datacodec.encode` takes) for this run under ``key``;
    failures only cost the next run its speed."""
    from profkit import datacodec

    try:
        folder = _results_dir(path)
        data = datacodec.encode(result)
        write_bytes_atomic(folder / RESULT_NAME.format(key=key), data, sweep=False)
    except (OSError, datacodec.CodecError) as exc:
        log.warning("could not cache the analysis of %s: %s", path, exc)


def load_report(path: Path, key: str) -> dict | None:
    """The report rendered for this run under ``key`` (:func:`store_report`'s fields), or
    None. It is JSON read as data; an entry that is corrupt or not of that shape is a miss."""
    target = _results_dir(path) / REPORT_NAME.format(key=key)
    try:
        entry = orjson.loads(target.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    shape = {"data": str, "summary": str, "problems": list}
    if not isinstance(entry, dict) or any(not isinstance(entry.get(k), t) for k, t in shape.items()) \
            or not all(isinstance(p, str) for p in entry["problems"]):
        log.debug("cached report %s unusable, analysing again", target)
        return None
    return entry


def store_report(path: Path, key: str, data: str, summary: str, problems: list[str]) -> None:
    """Cache a rendered report (its text, the verdict's summary line, the run's problems)
    so that the same command on the unchanged run prints it without analysing or importing
    the analysis; failures only cost the next run its speed."""
    try:
        entry = {"data": data, "summary": summary, "problems": problems}
        write_bytes_atomic(_results_dir(path) / REPORT_NAME.format(key=key),
                           orjson.dumps(entry), sweep=False)
    except (OSError, TypeError) as exc:
        log.warning("could not cache the report of %s: %s", path, exc)
