"""The Runs page's analyses of small runs, several at once, each in a process of a bounded
pool: a small run's analysis runs in one process (``analyze_run`` maps its few files there),
so threads of the server would take turns on the GIL and slow the pages down too.

A worker analyses the run as :func:`~profkit.dashboard.server.loading.show` does and keeps
the result in the run's result cache (:func:`profkit.run.cache.store_result`: data, never
pickle); the server then reads it back from there. Only a line of text (the error, if any)
crosses between the processes. A large run is analysed in the server's thread as before: its
own analysis spreads its files over a pool of processes.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from profkit import children
from profkit.run import cache
from profkit.run.loader import PARALLEL_MIN_BYTES

log = logging.getLogger(__name__)
MAX_WORKERS = 4  # runs analysed at once: each is one process (and its memory)
# a run at most this large is analysed in one process anyway (analyze_run's own pool
# starts at this size)
SMALL_RUN_BYTES = PARALLEL_MIN_BYTES


def usable() -> bool:
    """Whether the pool's workers start from a forkserver, as under ``profkit dashboard``
    (:func:`profkit.children.start_workers_by`). A worker forked straight from the server,
    whose threads may hold a lock at that moment (logging's, an import's), can wait for it
    forever: seen in a test process. Elsewhere the runs are analysed in threads."""
    return children.start_method() == "forkserver"


def pool_size(cpus: int | None = None) -> int:
    """Runs analysed at once: one per CPU, at most :data:`MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, cpus or os.cpu_count() or 1))


def analyse_and_keep(path: str, disk_key: str) -> str | None:
    """In a worker: analyse the run at ``path`` and keep what the pages show of it under
    ``disk_key``; None, or the message of the error that is all that can be shown."""
    from profkit.dashboard.server import loading

    shown = loading.show(Path(path))
    if isinstance(shown, loading.RunReadError):
        return str(shown)
    cache.store_result(Path(path), disk_key, shown)
    return None


class RunPool:
    """A process pool, started on first use, that analyses runs with
    :func:`analyse_and_keep`.

    Its workers are started by a thread of its own that stays until the pool is replaced:
    a worker is killed when the thread that started it ends (Linux's parent-death signal,
    :func:`profkit.children.process_pool`), and the background threads that ask for runs
    end whenever their queue is empty."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._retire: threading.Event | None = None  # ends the owning thread of the pool
        self._lock = threading.Lock()

    def _start(self) -> None:
        """A new pool, its workers started by a thread that then waits for its retirement."""
        ready, retire, made = threading.Event(), threading.Event(), {}

        def own() -> None:
            try:
                pool = children.process_pool(self.workers)
                pool.submit(int).result()  # the workers start here, from this thread
                made["pool"] = pool
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                made["error"] = exc
            ready.set()
            retire.wait()

        threading.Thread(target=own, name="profkit-run-pool", daemon=True).start()
        ready.wait()
        if "error" in made:
            raise made["error"]
        self._pool, self._retire = made["pool"], retire

    def analyse(self, path: Path, disk_key: str) -> str | None:
        """:func:`analyse_and_keep` in a worker, waited for. Raises BrokenProcessPool when
        the worker died (killed for memory, ...); the next call starts a new pool."""
        with self._lock:
            if self._pool is None:
                self._start()
            pool = self._pool
        try:
            return pool.submit(analyse_and_keep, str(path), disk_key).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
                    self._retire.set()
            raise
