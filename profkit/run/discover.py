"""Finding the trace files of a run and the rank each one claims.

The walk reads only names and ``stat`` results; it never opens a file. Each folder is
searched once (by device and inode, so a symbolic link back to a folder already searched
cannot loop), each file is listed once (a second name of the same file is noted, not read
twice), a symbolic link to a trace or folder outside the folder searched is named, not
followed (a link is no way to add another job's trace to a run, nor to have the dashboard
serve a file from elsewhere; pass the target itself to read it), and anything that is not
a regular file (a FIFO, whose opening would block for ever, a socket, a device, a broken
link) is named in the skipped list instead of being read.

The walk streams each folder (``os.scandir``) and keeps only the entries it may report: a
plain file whose name is no trace's is dropped unseen, without a ``stat``. A folder holding
more than :func:`max_files` trace-like entries (a wrong folder: a home directory, a
million-file dump) is refused as soon as that many are seen, before anything is read or
sorted, and a long walk says how far it has got on stderr.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from profkit.atomic import TMP_PREFIX
from profkit.errors import UsageError
from profkit.model import SkippedFile
from profkit.validate import MAX_RANKS

RUN_JSON = "run.json"
TRACE_SUFFIXES = (".json", ".json.gz")
# Folders a profkit run directory keeps non-trace data in (``profkit-report``: the in-job
# report of ``profile(summarize=True)``; ``ncu``: profkit ncu's counters), and the cache.
QUIET_DIRS = {"nvml", "nccl", "ncu", "ranks", "profkit-report", ".profkit", "__pycache__"}
MAX_DEPTH = 3
_RANK_RE = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)", re.IGNORECASE)
# On-demand captures (collectors/profile.py CAPTURE_DIR): complete run directories of their own.
CAPTURE_RE = re.compile(r"^capture-(\d+)-")
# What profkit itself names a rank's traces (collectors/capture/session.py TRACE_NAME,
# TRACE_CYCLE_NAME).
_PROFKIT_NAME_RE = re.compile(r"^rank(\d+)(?:\.cycle(\d+))?\.pt\.trace\.json(?:\.gz)?$")
# Trace files read at most at once: more is a wrong folder far more often than a job (10^5
# ranks is past the largest jobs profkit has seen). PROFKIT_MAX_FILES raises it.
MAX_FILES = 100_000
MAX_FILES_ENV = "PROFKIT_MAX_FILES"
PROGRESS_AFTER_S = 2.0  # a walk this long says how far it has got on stderr
PROGRESS_EVERY_S = 5.0  # ... and again this often (at most)
_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
            (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def run_folder(root: Path) -> Path:
    """The folder holding a run's run.json, NVML samples and rank status: the run path
    itself, or a single trace file's folder."""
    return root if root.is_dir() else root.parent


def is_trace_name(path: Path) -> bool:
    return _trace_named(path.name.lower())


def _trace_named(name: str) -> bool:
    """:func:`is_trace_name` of a lower-case file name."""
    # ``.tmp-`` names are files still being written (or left by a killed writer)
    return name.endswith(TRACE_SUFFIXES) and name != RUN_JSON and not name.startswith(TMP_PREFIX)


def may_be_trace(path: Path) -> bool:
    """Whether a file profkit does not read is named like a trace all the same (worth a
    line in the report): ``rank0.json.zst``, ``trace.json.gz.1``, ``rank1.pt.trace``; not a
    README, a LICENSE, notes or a script."""
    return _trace_like(path.name.lower())


def _trace_like(name: str) -> bool:
    """:func:`may_be_trace` of a lower-case file name."""
    return (name != RUN_JSON and not name.startswith(".")
            and (".json" in name or ".pt.trace" in name))


def rank_from_name(path: str | Path) -> int | None:
    """Rank from a file name such as ``rank3.json``, ``rank-3.json.gz`` or
    ``rank_3.<worker>.pt.trace.json``; None if the name carries none."""
    match = _RANK_RE.search(Path(path).name)
    rank = int(match.group(1)) if match and len(match.group(1)) < 10 else None
    return rank if rank is not None and rank < MAX_RANKS else None  # else a number, no rank


def profkit_name(path: str | Path) -> tuple[int, int] | None:
    """(rank, cycle) of a file named the way ``profkit.profile`` names traces
    (``rank3.pt.trace.json.gz`` is cycle 0, ``rank3.cycle2.pt.trace.json.gz`` cycle 2)."""
    match = _PROFKIT_NAME_RE.match(Path(path).name)
    return (int(match.group(1)), int(match.group(2) or 0)) if match else None


def capture_number(path: Path) -> int | None:
    """k of an on-demand capture folder ``capture-{k}-{stamp}``; None for other names."""
    match = CAPTURE_RE.match(path.name)
    return int(match.group(1)) if match else None


@dataclass
class Found:
    """What a walk found: trace files, other entries skipped with a reason, capture folders."""

    traces: list[Path] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    captures: list[Path] = field(default_factory=list)
    seen: dict[tuple[int, int], Path] = field(default_factory=dict)  # (dev, inode) -> first path
    root: Path | None = None  # the searched folder, resolved: links may not lead out of it
    folder: Path | None = None  # the searched folder as given (messages)
    limit: int = MAX_FILES  # trace-like entries the walk accepts (see max_files)
    counted: int = 0  # trace-like entries seen so far
    scanned: int = 0  # entries seen so far, of any kind
    started_s: float = field(default_factory=time.monotonic)
    said_s: float = 0.0  # when progress was last said on stderr


def find_trace_files(path: Path) -> tuple[list[Path], list[SkippedFile]]:
    """Trace files under ``path`` (a file, or a folder searched a few levels deep) and the
    other entries found there, skipped with a note. On-demand capture folders are listed as
    skipped (see :func:`walk` to get them apart)."""
    found = walk(path)
    skipped = found.skipped + [SkippedFile(str(c), _capture_reason(c)) for c in found.captures]
    return found.traces, skipped


def walk(path: Path) -> Found:
    """The trace files, skipped entries and capture folders under ``path``."""
    path = Path(path)
    found = Found()
    if not path.is_dir():
        found.traces.append(path)
        return found
    found.folder, found.limit = path, max_files()
    st = os.stat(path)
    found.seen[(st.st_dev, st.st_ino)] = path
    found.root = path.resolve()
    _walk(path, 0, found)
    found.traces.sort(key=_natural_key)
    found.captures.sort(key=lambda p: (capture_number(p), p.name))
    return found


def _walk(folder: Path, depth: int, found: Found) -> None:
    try:
        with os.scandir(folder) as scan:
            entries = sorted(_kept(folder, scan, found), key=lambda e: e.name)
    except OSError as exc:
        found.skipped.append(SkippedFile(str(folder), f"cannot list this folder: {exc.strerror}"))
        return
    for entry in entries:
        item = Path(entry.path)
        st, problem = _stat(item)
        if problem:
            found.skipped.append(SkippedFile(str(item), problem))
        elif stat.S_ISDIR(st.st_mode):
            _enter(item, st, depth, found)
        elif stat.S_ISREG(st.st_mode):
            _add_file(item, st, found)
        else:
            found.skipped.append(SkippedFile(str(item), not_a_file_reason(item, st)))


def max_files() -> int:
    """The most trace-like entries a walk accepts: ``$PROFKIT_MAX_FILES`` when set, else
    :data:`MAX_FILES`."""
    text = os.environ.get(MAX_FILES_ENV, "").strip()
    if not text:
        return MAX_FILES
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{MAX_FILES_ENV}={text!r}: expected a whole number of files, "
                         f"e.g. {MAX_FILES_ENV}={10 * MAX_FILES}")
    return int(text)


def _kept(folder: Path, scan: Iterator[os.DirEntry], found: Found) -> Iterator[os.DirEntry]:
    """The entries of ``folder`` the walk may report, as ``scan`` lists them: a plain file
    whose name says it is no trace (what :func:`_add_file` would pass over in silence) is
    dropped from the type the listing gives, without a ``stat``, so that a folder of a
    million files costs neither a million ``stat`` calls nor a million entries held. The
    others but folders count towards ``found.limit``; one more is a :class:`UsageError`."""
    quiet = folder.name in QUIET_DIRS
    for entry in scan:
        found.scanned += 1
        if found.scanned % 1024 == 0:
            _say_progress(found)
        name = entry.name.lower()
        try:
            plain = entry.is_file(follow_symlinks=False)
            folder_entry = entry.is_dir(follow_symlinks=False)
        except OSError:  # gone, or no type from the listing: kept, for _walk's stat to say
            plain = folder_entry = False
        if plain and (quiet or name.startswith(TMP_PREFIX)
                      or not (_trace_named(name) or _trace_like(name))):
            continue
        if not folder_entry:
            found.counted += 1
            if found.counted > found.limit:
                raise UsageError(_too_many(found))
        yield entry


def _too_many(found: Found) -> str:
    return (f"{found.folder} holds more than {found.limit:,} files named like traces; profkit "
            f"reads at most {found.limit:,} at once: pass a sub-folder (one job's run "
            f"directory), or set {MAX_FILES_ENV} to a larger number, e.g. "
            f"{MAX_FILES_ENV}={10 * found.limit}")


def _say_progress(found: Found) -> None:
    """One line on stderr about how far a long walk has got (the first after
    :data:`PROGRESS_AFTER_S`, then at most every :data:`PROGRESS_EVERY_S`): a walk of a
    large folder on a slow file system is seen to be working, not hung."""
    now = time.monotonic()
    if now - found.started_s < PROGRESS_AFTER_S or now - found.said_s < PROGRESS_EVERY_S:
        return
    found.said_s = now
    print(f"profkit: searching {found.folder}: {found.scanned:,} entries, "
          f"{found.counted:,} named like traces so far", file=sys.stderr, flush=True)


def not_a_file_reason(item: Path, st: os.stat_result) -> str:
    """Why an entry that is neither a file nor a folder is not read: what it is (and where
    a symbolic link points)."""
    kind = next((what for test, what in _SPECIAL if test(st.st_mode)), "not a regular file")
    if item.is_symlink():
        kind = f"a symbolic link to {os.readlink(item)}, {kind}"
    return f"{kind}, not a trace file: not opened"


def _leaves(item: Path, found: Found) -> bool:
    """Whether ``item``, a trace or folder the walk would read, is a symbolic link out of
    the folder searched; if so it is listed as skipped, not followed."""
    if found.root is None or not item.is_symlink():
        return False
    target = item.resolve()  # stat followed it: no loop
    if target.is_relative_to(found.root):
        return False
    found.skipped.append(SkippedFile(str(item), f"a symbolic link to {target}, outside the run "
                                     "directory: not followed (links outside the run directory "
                                     "are left out; pass the file itself to read it)"))
    return True


def _stat(item: Path) -> tuple[os.stat_result | None, str | None]:
    """The entry's stat through symbolic links, or why there is none."""
    try:
        return os.stat(item), None
    except OSError as exc:
        if item.is_symlink():
            return None, f"a broken symbolic link (to {os.readlink(item)}: {exc.strerror})"
        return None, f"cannot read: {exc.strerror}"


def _enter(item: Path, st: os.stat_result, depth: int, found: Found) -> None:
    if capture_number(item) is not None:
        found.captures.append(item)
        return
    if is_trace_name(item):  # rank1.json/: named, so that a missing rank is explained
        found.skipped.append(SkippedFile(str(item), "a folder, not a trace file: not searched"))
        return
    if item.name in QUIET_DIRS or item.name.startswith(".") or depth + 1 >= MAX_DEPTH:
        return
    if _leaves(item, found):
        return
    first = found.seen.setdefault((st.st_dev, st.st_ino), item)
    if first != item:  # a link to a folder already searched (possibly an ancestor: a loop)
        found.skipped.append(SkippedFile(str(item), f"the same folder as {first}, already searched"))
        return
    _walk(item, depth + 1, found)


def _add_file(item: Path, st: os.stat_result, found: Found) -> None:
    name = item.name
    if item.parent.name in QUIET_DIRS or name.startswith(TMP_PREFIX):
        return  # a profkit data folder, or a file still being written
    if not is_trace_name(item):
        if may_be_trace(item):  # named like a trace in a form profkit does not read
            found.skipped.append(SkippedFile(str(item), "not a trace file (expected .json or .json.gz)"))
        return  # a README, LICENSE, notes.txt, a script: not a trace, said nowhere
    if _leaves(item, found):
        return
    first = found.seen.setdefault((st.st_dev, st.st_ino), item)
    if first != item:
        found.skipped.append(SkippedFile(str(item), f"the same file as {first}, read once"))
        return
    found.traces.append(item)


def listing(skipped: list[SkippedFile], most: int = 5) -> str:
    """The entries a walk left out, for an error that says nothing was found."""
    return f" (skipped: {named(skipped, most)})" if skipped else ""


def named(skipped: list[SkippedFile], most: int) -> str:
    """The first ``most`` skipped entries with their reasons, then how many more."""
    more = f"; and {len(skipped) - most} more" if len(skipped) > most else ""
    return "; ".join(f"{s.path}: {s.reason}" for s in skipped[:most]) + more


def _capture_reason(folder: Path) -> str:
    return (f"on-demand capture {capture_number(folder)}: a run of its own "
            f"(read it with: profkit analyze {folder})")


def _natural_key(path: Path) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]
