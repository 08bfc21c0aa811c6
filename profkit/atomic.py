"""Writing files so that readers never see half of one, and cleaning up after writers that
died.

Every file is written to a temporary name beside its target, ``.tmp-<name>.<owner>.<random>``
(readers skip names starting with ``.tmp-``), and renamed into place. ``<owner>`` is
``<pid>-<machine>``: the writer's process id and a tag of the machine and pid namespace it
runs in, so that a later writer can tell an orphan (left by a process that was killed) from a
temporary that a live process is still writing. Files are created as ``open()`` creates them:
mode 0666 less the umask, or the mode of the file they replace.

A target that is no regular file (``/dev/null``, ``/dev/stdout``, a named pipe) is written
in place: renaming a temporary over it would replace the device with a file (as root, that
breaks ``/dev/null`` for the whole machine).

A failure to write (no space, no permission, a folder in the way) raises
:class:`~profkit.errors.OutputError` naming the target; the temporary is removed and an
existing target is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from profkit.errors import OutputError

log = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"
# A temporary whose writer cannot be checked (another machine, or an older naming) counts as
# abandoned once nobody has written to it for this long: every profkit writer touches its
# temporary far more often than that while it works.
STALE_AFTER_S = 600.0
_FILE_MODE = 0o666  # what open() asks for; the kernel applies the umask
# <pid>-<machine>.<random>, then up to two suffixes: a capture's Kineto export adds ".json"
# and Kineto's own temporary beside it ".json.tmp" (collectors/capture/saved_trace.py)
_OWNED_RE = re.compile(r"\.(\d+)-([0-9a-f]{8})\.[0-9a-f]{8}(?:\.[A-Za-z0-9]+){0,2}$")
_MKSTEMP_RE = re.compile(r"\.[a-z0-9_]{8}$")  # the names tempfile.mkstemp gave before


@functools.cache
def machine_tag() -> str:
    """Eight hex digits naming this machine, boot and pid namespace: where a process id in a
    temporary's name can be checked with :func:`os.kill`."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):  # Linux; elsewhere the host name alone
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):  # containers sharing a host name have their own
        parts.append(os.readlink("/proc/self/ns/pid"))
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:8]


def tmp_name(dest: str | os.PathLike, suffix: str = "") -> Path:
    """A fresh temporary name beside ``dest`` (not created), owned by this process."""
    dest = Path(dest)
    owner = f"{os.getpid()}-{machine_tag()}"
    return dest.parent / f"{TMP_PREFIX}{dest.name}.{owner}.{secrets.token_hex(4)}{suffix}"


def is_stale(path: Path, now_s: float | None = None) -> bool:
    """Whether ``path``, a temporary of profkit's naming, was abandoned by its writer: the
    process named in it is gone (same machine), or it has not been written for
    :data:`STALE_AFTER_S` (another machine, older naming). Anything else is kept."""
    name = path.name
    if not name.startswith(TMP_PREFIX):
        return False
    try:
        st = path.lstat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    owned = _OWNED_RE.search(name)
    if owned and owned.group(2) == machine_tag():
        return not _pid_alive(int(owned.group(1)))
    if owned or _MKSTEMP_RE.search(name):
        return (now_s or time.time()) - st.st_mtime > STALE_AFTER_S
    return False  # not a name profkit writes


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except (OverflowError, ValueError):
        return False  # no process can have this id
    return True


def sweep_stale(folder: str | os.PathLike, target: str | None = None) -> int:
    """Remove abandoned temporaries in ``folder`` (only those of ``target`` when given);
    returns how many. Never raises: cleaning up is a courtesy, not part of the write."""
    prefix = f"{TMP_PREFIX}{target}." if target else TMP_PREFIX
    removed = 0
    now_s = time.time()
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return 0
    for name in names:
        path = Path(folder) / name
        if is_stale(path, now_s):
            try:
                path.unlink()
                removed += 1
                log.debug("removed abandoned temporary %s", path)
            except OSError as exc:
                log.debug("could not remove abandoned temporary %s: %s", path, exc)
    return removed


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike, *, sweep: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write; on success it replaces ``dest``, on any exception it is
    removed and ``dest`` is left as it was. ``sweep`` first removes abandoned temporaries of
    ``dest`` (writers of many files in one folder sweep the folder once instead)."""
    dest = Path(dest)
    if is_special(dest):
        with _in_place(dest) as fh:
            yield fh
        return
    fd, tmp = _create(dest, sweep)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        _raise_named(exc, dest, tmp)
        raise


def _raise_named(exc: BaseException, dest: Path, written: Path) -> None:
    """Raise an :class:`OutputError` naming ``dest`` for an error of writing ``written``
    (errors of opens, writes, flushes and renames carry no file name or ``written``'s);
    return for any other error (one opening some input inside the block names that input
    and stays as it is)."""
    if isinstance(exc, OSError) and not isinstance(exc, OutputError) \
            and exc.filename in (None, str(written)):
        raise OutputError(dest, exc) from exc


def is_special(dest: Path) -> bool:
    """Whether ``dest`` (or what its link points to) exists and is neither a regular file
    nor a folder: a device, a named pipe or a socket, written in place, never replaced."""
    try:
        mode = dest.stat().st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def _in_place(dest: Path) -> Iterator[BinaryIO]:
    try:
        with open(dest, "wb") as fh:
            yield fh
    except BaseException as exc:
        _raise_named(exc, dest, dest)
        raise


def _create(dest: Path, sweep: bool) -> tuple[int, Path]:
    """Open a new temporary for ``dest``, failing before any work is done when ``dest``
    cannot be written."""
    try:
        if dest.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(dest))
        if dest.parent.exists() and not dest.parent.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(dest.parent))
        dest.parent.mkdir(parents=True, exist_ok=True)
        if sweep:
            sweep_stale(dest.parent, dest.name)
        try:  # replacing a file keeps its mode, as writing it with open() would
            mode = stat.S_IMODE(dest.stat().st_mode)
        except FileNotFoundError:
            mode = None
        tmp = tmp_name(dest)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
    except OSError as exc:
        raise OutputError(dest, exc) from exc
    if mode is not None:
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode)
    return fd, tmp


def write_bytes_atomic(dest: str | os.PathLike, data: bytes, *, sweep: bool = True) -> Path:
    with atomic_open(dest, sweep=sweep) as fh:
        fh.write(data)
    return Path(dest)


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike, replaces: Callable[[Path], bool]) -> Iterator[Path]:
    """A new, empty folder to fill; on success it takes the place of ``dest``, on any
    exception it is removed and ``dest`` is left as it was. An existing ``dest`` is replaced
    only when it is empty or ``replaces(dest)`` says it is an earlier output of the same
    kind: a folder of someone's other files is never removed. Abandoned temporary folders of
    ``dest`` (their writer killed) are removed first."""
    dest = Path(dest)
    tmp = tmp_name(dest)
    try:
        _check_replaceable(dest, replaces)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _sweep_dirs(dest)
        tmp.mkdir()
    except OSError as exc:
        raise OutputError(dest, exc) from exc
    try:
        yield tmp
        for path in tmp.iterdir():  # on disk before the folder appears under its name
            with open(path, "rb+") as fh:
                os.fsync(fh.fileno())
        _swap_in(tmp, dest)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and not isinstance(exc, OutputError):
            raise OutputError(dest, exc) from exc
        raise


def _check_replaceable(dest: Path, replaces: Callable[[Path], bool]) -> None:
    if dest.exists() and not dest.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of the folder", str(dest))
    if dest.is_dir() and any(dest.iterdir()) and not replaces(dest):
        raise FileExistsError(errno.EEXIST, "the folder holds other files: not replaced",
                              str(dest))


def _swap_in(tmp: Path, dest: Path) -> None:
    """Rename ``tmp`` to ``dest``; an existing ``dest`` is moved aside first and removed
    after, or put back if the rename fails."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    old = tmp_name(dest)
    os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except OSError:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _sweep_dirs(dest: Path) -> None:
    """Remove temporary folders of ``dest`` whose writer is gone: its process has ended (this
    machine), or nobody wrote into it for :data:`STALE_AFTER_S` (another machine)."""
    prefix = f"{TMP_PREFIX}{dest.name}."
    try:
        with os.scandir(dest.parent) as entries:
            found = [Path(e.path) for e in entries
                     if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for path in found:
        owned = _OWNED_RE.search(path.name)
        if owned is None:
            continue  # not a name profkit writes
        try:
            gone = (not _pid_alive(int(owned.group(1))) if owned.group(2) == machine_tag()
                    else time.time() - path.stat().st_mtime > STALE_AFTER_S)
        except OSError:
            continue
        if gone:
            shutil.rmtree(path, ignore_errors=True)
            log.debug("removed abandoned temporary folder %s", path)
