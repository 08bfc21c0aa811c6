"""Who may write a rank's files into a run directory.

Two captures writing one rank's files into one run directory would overwrite each other's
traces and status, and both would say ``ok``. So:

- **Another process** (a second job started into the same folder) is refused: each rank
  holds an advisory lock, :class:`RankClaim`, on ``ranks/.capture-rank{R}.lock`` while it
  captures. The lock is the kernel's (``flock``): a killed job leaves no stale claim.
- **The same process again** (``profile()`` entered a second time, after the first ended)
  continues the first: the same run id, cycle numbers that follow the first session's, its
  traces kept (:func:`earlier_session`, :func:`remember_session`).
"""

from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: no claim is taken there
    fcntl = None  # type: ignore[assignment]

CLAIM_NAME = "ranks/.capture-rank{rank}.lock"


class ClaimRefused(Exception):
    """Another process is capturing this rank into the run directory."""


class RankClaim:
    """The lock of one rank's files in a run directory, held from :meth:`take` until
    :meth:`release`."""

    def __init__(self, run_dir: Path):
        self.dir = Path(run_dir)
        self.path: Path | None = None
        self._fd: int | None = None

    def take(self, rank: int) -> RankClaim:
        """Take ``rank``'s lock, or raise :class:`ClaimRefused` naming its holder. An
        OSError (the folder cannot be written) propagates."""
        if fcntl is None:
            return self
        self.path = self.dir / CLAIM_NAME.format(rank=rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise ClaimRefused(f"another capture ({holder}) is writing rank files into this "
                               "run directory; give each job its own") from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        _write_holder(fd)
        return self

    def release(self) -> None:
        """Give the lock back (closing the file does); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _write_holder(fd: int) -> None:
    """Who holds the lock, for the message of whoever is refused (best effort)."""
    text = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError:
        pass


def _read_holder(fd: int) -> str:
    try:
        who = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"process {int(who['pid'])} on {str(who['host'])[:64]}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@dataclass
class EarlierSession:
    """What a finished capture of this process wrote for one rank of a run directory."""

    run_id: str
    cycles: int  # cycle numbers used (the next session's first cycle is this one)
    traces: list[Path] = field(default_factory=list)


_earlier: dict[tuple[str, int], EarlierSession] = {}
_earlier_lock = threading.Lock()


def _key(run_dir: Path, rank: int) -> tuple[str, int]:
    return (os.path.realpath(run_dir), rank)


def earlier_session(run_dir: Path, rank: int) -> EarlierSession | None:
    """The finished session of this process into ``run_dir`` for ``rank``, when its files
    are still there (a folder emptied since is a new run)."""
    with _earlier_lock:
        found = _earlier.get(_key(run_dir, rank))
    if found is not None and found.traces and not any(p.exists() for p in found.traces):
        return None
    return found


def remember_session(run_dir: Path, rank: int, session: EarlierSession) -> None:
    """Record a finished session, for the next one into the same folder."""
    with _earlier_lock:
        _earlier[_key(run_dir, rank)] = session
