"""On-demand capture triggers: SIGUSR1 or the modification of a file.

While idle, ``Profile.step()`` only calls :meth:`poll`, which reads a flag (signal) or
stats a file every ``every`` steps. In a distributed job the answer is agreed by all ranks
at the same check steps (see ``Profile``), so every rank starts the capture together.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

from profkit.collectors.collector_errors import CollectorError

log = logging.getLogger(__name__)

FILE_PREFIX = "file:"
SIGNAL_NAMES = ("signal", "sigusr1")
DEFAULT_EVERY = 10  # steps between file checks (and between agreement rounds)


class SignalTrigger:
    """Fires after SIGUSR1 (or ``signum``). The handler only sets a flag; a previous Python
    handler is chained, the default action (terminate) is not."""

    def __init__(self, signum: int = signal.SIGUSR1, every: int = 1):
        self.signum, self.every = signum, max(1, every)
        self._fired = False
        self._prev: Any = None
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise CollectorError("trigger='signal' needs profile() entered in the main thread")
        self._prev = signal.signal(self.signum, self._handler)
        self._installed = True

    def _handler(self, signum: int, frame: Any) -> None:
        self._fired = True
        if callable(self._prev):
            self._prev(signum, frame)

    def fire(self) -> None:
        """Fire programmatically (tests, or an in-process controller)."""
        self._fired = True

    def poll(self, step: int) -> bool:
        if step % self.every or not self._fired:
            return False
        self._fired = False
        return True

    def close(self) -> None:
        if self._installed:
            signal.signal(self.signum, self._prev if self._prev is not None else signal.SIG_DFL)
            self._installed = False


class FileTrigger:
    """Fires when ``path`` is created or its mtime changes (``touch path``), checked every
    ``every`` steps. The file is not deleted, so all ranks of a job can watch one file."""

    def __init__(self, path: str | os.PathLike, every: int = DEFAULT_EVERY):
        self.path, self.every = Path(path), max(1, every)
        self._seen = self._mtime()

    def install(self) -> None:
        self._seen = self._mtime()

    def _mtime(self) -> int | None:
        try:
            return self.path.stat().st_mtime_ns
        except OSError:
            return None

    def poll(self, step: int) -> bool:
        if step % self.every:
            return False
        m = self._mtime()
        if m is None or m == self._seen:
            return False
        self._seen = m
        return True

    def close(self) -> None:
        pass


def make_trigger(spec: Any, every: int | None = None) -> Any:
    """``"signal"``, ``"file:/path"``, an object with ``poll(step)``, or None."""
    if spec is None or hasattr(spec, "poll"):
        return spec
    if not isinstance(spec, str):
        raise CollectorError(f"trigger must be 'signal' or 'file:/path', not {spec!r}")
    if spec.lower() in SIGNAL_NAMES:
        return SignalTrigger(every=every or 1)
    if spec.startswith(FILE_PREFIX) and len(spec) > len(FILE_PREFIX):
        return FileTrigger(spec[len(FILE_PREFIX):], every=every or DEFAULT_EVERY)
    raise CollectorError(f"trigger must be 'signal' or 'file:/path', not {spec!r}")
