"""What a capture could not write, and the space kept to say so.

A profiler must never stop the job it watches. When a write of the capture fails (a full
disk, an I/O error, no permission, a folder gone), the capture stops (the session stops the
profiler and the NVML sampler), one warning names the run directory and the cause, and the
training goes on. What was lost is listed in the rank's status file (``ranks/rank{R}.json``:
``capture_stopped`` and ``lost``, see docs/run-directory.md) and the run's status becomes
``incomplete``, so that ``profkit analyze`` says what is missing.

On a full disk even that status file would not fit: each rank keeps a small reserve file
(:class:`Reserve`, a temporary of :mod:`profkit.atomic`'s naming, so readers skip it and a
killed rank's is swept) that is deleted to make room when a status write fails.
"""

from __future__ import annotations

import contextlib
import errno as errno_mod
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from profkit.collectors.run_dir_writes import tmp_name

log = logging.getLogger(__name__)

RESERVE_NAME = "reserve-rank{rank}"  # the reserve is .tmp-reserve-rank{R}.<owner>.<random>
MIN_RESERVE_BYTES = 64 * 1024  # a rank status file and its temporary, many times over
T = TypeVar("T")


def cause(exc: BaseException) -> str:
    """The cause of a failed write in a few words: ``no space left on device``."""
    code = getattr(exc, "errno", None)
    text = getattr(exc, "strerror", None)
    if not text and isinstance(code, int):  # profkit's OutputError keeps only the errno
        text = os.strerror(code)
    if not text:  # not a system error: its own words
        return str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def errno_name(exc: BaseException) -> str | None:
    """``ENOSPC`` for an OSError with that errno; None for other errors."""
    code = getattr(exc, "errno", None)
    return errno_mod.errorcode.get(code) if isinstance(code, int) else None


class CaptureLosses:
    """The capture's failed writes (thread-safe: the NVML sampler reports from its thread).

    The first failure sets :attr:`stopped` (``{step, ts_ns, what, file, cause, errno}``)
    and logs the one warning; :meth:`halt_due` then tells the session, on the training
    thread, to stop capturing."""

    def __init__(self, run_dir: Path, rank: int):
        self.dir, self.rank = Path(run_dir), rank
        self.lost: list[dict[str, Any]] = []
        self.stopped: dict[str, Any] | None = None
        self._halt_pending = False
        self._lock = threading.Lock()

    def record(self, what: str, path: str | os.PathLike | None, exc: BaseException | None,
               step: int, after_capture: bool = False, **detail: Any) -> None:
        """A write of ``what`` (``trace``, ``nvml``, ...) into ``path`` failed with ``exc``
        (None: it was dropped because the capture had stopped); ``detail`` adds to the
        record (``cycle``, ``samples``). ``after_capture``: a write at or after the
        capture's end (the in-job report, a profiler that failed to stop), which stops
        nothing and is only listed."""
        entry = {"what": what, "file": self._relative(path),
                 "cause": cause(exc) if exc is not None else "capture stopped before it",
                 **detail}
        with self._lock:
            self.lost.append(entry)
            first = exc is not None and self.stopped is None and not after_capture
            if first:
                self.stopped = {"step": step, "ts_ns": time.time_ns(), "what": what,
                                "file": entry["file"], "cause": entry["cause"],
                                "errno": errno_name(exc)}
                self._halt_pending = True
        if first:
            failed = f"cannot write the {what} into" if path is not None else f"the {what} failed in"
            log.warning("profkit: %s %s: %s; capturing stops at step %d, the job goes on "
                        "(%s lists what is lost)", failed, self.dir, entry["cause"], step,
                        f"ranks/rank{self.rank}.json")
        elif exc is not None and not after_capture:
            log.debug("profkit: %s not written (%s)", entry["file"], entry["cause"])

    def not_captured(self, what: str, reason: str, step: int) -> None:
        """``what`` is not captured from ``step`` on, for ``reason`` (another profiler runs
        in the process, say). Listed as the capture's stop, but nothing halts: the rest of
        the capture (the NVML sampler) goes on. The caller has warned."""
        with self._lock:
            self.lost.append({"what": what, "file": None, "cause": reason})
            if self.stopped is None:
                self.stopped = {"step": step, "ts_ns": time.time_ns(), "what": what,
                                "file": None, "cause": reason, "errno": None}

    def halt_due(self) -> bool:
        """True once after the first failure: the caller stops capturing now."""
        with self._lock:
            due, self._halt_pending = self._halt_pending, False
        return due

    def as_status(self) -> dict[str, Any]:
        """The status file's keys: ``capture_stopped`` and ``lost`` (absent when none)."""
        with self._lock:
            if not self.lost:
                return {}
            return {"capture_stopped": self.stopped, "lost": list(self.lost)}

    def _relative(self, path: str | os.PathLike | None) -> str | None:
        if path is None:
            return None
        with contextlib.suppress(ValueError):
            return str(Path(path).relative_to(self.dir))
        return str(path)


class Reserve:
    """``nbytes`` of the run directory's disk held by a hidden file, given back when a
    status write fails for want of space (:meth:`write`) and when the capture is over."""

    def __init__(self, run_dir: Path, rank: int, nbytes: int = MIN_RESERVE_BYTES):
        self.path: Path | None = None
        dest = Path(run_dir) / RESERVE_NAME.format(rank=rank)
        path = tmp_name(dest)
        try:
            with open(path, "wb") as fh:  # real bytes, not a sparse file: they hold blocks
                fh.write(bytes(max(nbytes, 1)))
                fh.flush()
                os.fsync(fh.fileno())
            self.path = path
        except OSError as exc:
            log.debug("profkit: no reserve in %s (%s)", run_dir, cause(exc))
            with contextlib.suppress(OSError):
                path.unlink()

    def release(self) -> bool:
        """Delete the reserve; True when there was one to delete."""
        path, self.path = self.path, None
        if path is None:
            return False
        with contextlib.suppress(OSError):
            path.unlink()
        return True

    def write(self, fn: Callable[[], T]) -> T:
        """``fn()`` (a write); when it fails and the reserve still holds space, the space is
        given back and ``fn()`` tried once more."""
        try:
            return fn()
        except OSError:
            if not self.release():
                raise
        return fn()
