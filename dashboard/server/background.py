"""Runs analysed in the background, in the order a page last asked for them.

The Runs page asks for every run, in the order its rows are shown, each time it is drawn
and polled: the runs not yet analysed are queued in that order (those already queued move
to the front in that order too), so that the first rows get their verdicts first and a run
scrolled into view, or named on the command line, is not stuck behind the whole list. A
few daemon threads take the runs off the front of the queue one at a time; they end when
the queue is empty, and never keep the process from stopping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)
QUEUED, ANALYSING = "queued", "analysing"


class Background:
    """A queue of run keys and the threads that work through it with ``work(key)``."""

    def __init__(self, work: Callable[[str], None], name: str = "profkit-runs"):
        self._work = work
        self._name = name
        self._lock = threading.Lock()
        self._queue: list[str] = []  # the next one first
        self._running: set[str] = set()
        self._threads = 0

    def want(self, keys: list[str], workers: int) -> list[str]:
        """Queue ``keys`` in this order ahead of the others still waiting (those already
        being worked on are left alone), with up to ``workers`` threads; returns the keys
        newly queued."""
        with self._lock:
            ahead = [k for k in dict.fromkeys(keys) if k not in self._running]
            wanted = set(ahead)
            new = [k for k in ahead if k not in self._queue]
            self._queue = ahead + [k for k in self._queue if k not in wanted]
            start = max(0, min(workers, len(self._queue)) - self._threads)
            self._threads += start
        for _ in range(start):
            threading.Thread(target=self._loop, name=self._name, daemon=True).start()
        return new

    def state(self, key: str) -> str:
        """ANALYSING, QUEUED or "" (neither)."""
        with self._lock:
            if key in self._running:
                return ANALYSING
            return QUEUED if key in self._queue else ""

    def pending(self) -> list[str]:
        """The keys waiting, the next first."""
        with self._lock:
            return list(self._queue)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._threads -= 1
                    return
                key = self._queue.pop(0)
                self._running.add(key)
            try:
                self._work(key)
            except Exception:  # noqa: BLE001 - one run's failure never ends the queue
                log.exception("%s: background analysis failed", key)
            finally:
                with self._lock:
                    self._running.discard(key)
