"""SIGTERM handling that saves the capture, then chains to the previous handler."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger(__name__)

TERM_SIGNALS = (signal.SIGTERM,)


class TermHandler:
    """While installed, a SIGTERM first calls ``on_term(signum)`` (which saves the capture)
    and then does what the previous handler would have done: call it, ignore the signal,
    or (default action) terminate the process with that signal."""

    def __init__(self, on_term: Callable[[int], None], signums: tuple[int, ...] = TERM_SIGNALS):
        self.on_term, self.signums = on_term, signums
        self._prev: dict[int, Any] = {}
        self._pending: int | None = None  # a signal that came while held
        self._held: list[tuple[str, bool]] = []  # each open held() block's (during, warn)

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # signal.signal only works in the main thread
        for s in self.signums:
            self._prev[s] = signal.signal(s, self._handle)
        return True

    def uninstall(self) -> None:
        for s, prev in self._prev.items():
            try:
                signal.signal(s, prev if prev is not None else signal.SIG_DFL)
            except (ValueError, OSError):
                log.debug("cannot restore handler of signal %s", s, exc_info=True)
        self._prev.clear()

    @contextlib.contextmanager
    def held(self, during: str = "saving the capture", warn: bool = True) -> Iterator[None]:
        """Inside, a signal waits until the block ends, then is handled as usual. The
        handler runs on this same thread, so it must not cut into work it would undo or
        redo: the saving of a capture under way (a process that dies half-way through it
        leaves no status on disk; torchrun's SIGTERM to the other ranks comes right when
        they are saving after a peer failed), or the profiler's own step (stopping the
        profiler between its step's end and the next step's start fails, and the trace
        is lost). ``warn``: say so when a signal waits (not for a wait of microseconds)."""
        self._held.append((during, warn))
        try:
            yield
        finally:
            self._held.pop()
            if not self._held and self._pending is not None:
                signum, self._pending = self._pending, None
                self._handle(signum, None)

    def _handle(self, signum: int, frame: Any) -> None:
        if self._held:
            during, warn = self._held[-1]  # what is being done now
            log.log(logging.WARNING if warn else logging.DEBUG,
                    "profkit: signal %s while %s; handled once that is done", signum, during)
            self._pending = signum
            return
        prev = self._prev.get(signum, signal.SIG_DFL)
        try:
            self.on_term(signum)
        except Exception:  # noqa: BLE001 - never block termination
            log.error("profkit: saving the capture on signal %s failed", signum, exc_info=True)
        self.uninstall()
        if callable(prev):
            prev(signum, frame)
        elif prev != signal.SIG_IGN:
            os.kill(os.getpid(), signum)  # default action, now that SIG_DFL is back


def signal_error(signum: int) -> dict[str, str]:
    """The run.json ``error`` of a run ended by ``signum``."""
    name = signal.Signals(signum).name
    return {"type": f"signal.{name}", "message": f"terminated by {name} ({int(signum)})"}
