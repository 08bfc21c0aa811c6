"""Process pools that Ctrl-C stops at once, leaving nothing behind.

The workers come from :func:`profkit.children.process_pool`: they die with this process
and ignore SIGINT, which only this process takes (as the ``profkit`` program,
:class:`profkit.children.SignalStop` also ends them first). They are started with SIGINT
blocked (:func:`sigint_blocked` around the first submit), so that a Ctrl-C to the whole
process group while they start is not taken by them either. Leaving the pool's block by an
exception (KeyboardInterrupt, GeneratorExit, an error) kills the workers instead of waiting
for their tasks (which took seconds, and at times never ended: a KeyboardInterrupt inside
multiprocessing's receive), cancels what is queued, reaps them, then lets the caller remove
what they left half written (``on_kill``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

from profkit import children

log = logging.getLogger(__name__)
REAP_TIMEOUT_S = 1.0  # per killed worker; SIGKILL cannot be refused, so this is ample


@contextlib.contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT held back in this thread for the block (and in the processes and threads it
    starts); one that arrives meanwhile is taken when the block ends."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (AttributeError, OSError, ValueError):  # no pthread_sigmask on this platform
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def process_pool(workers: int, *, on_kill: Callable[[], None] | None = None
                 ) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` (:func:`profkit.children.process_pool`). Submit the
    work with :func:`sigint_blocked` held (the first submit starts the workers). Leaving the
    block normally lets the workers end on their own, without waiting for them: their work
    is done, and their exit (the kernel freeing a large rank's memory: ~25 ms on the 2 x 75
    MB run) overlaps what the caller does next; the pool's manager thread reaps them.
    Leaving it by any exception kills them, then calls ``on_kill`` (to remove what killed
    workers left half written) and re-raises."""
    pool = children.process_pool(workers)
    try:
        yield pool
    except BaseException as exc:
        with sigint_blocked():  # a second Ctrl-C must not cut the clean-up short
            kill_workers(pool)
            if on_kill is not None:
                on_kill()
        stopped = children.stop_signal()
        if stopped is not None and not isinstance(exc, KeyboardInterrupt):
            raise children.Stopped(stopped) from exc  # a broken pool: the stop's echo
        raise
    pool.shutdown(wait=False)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers (SIGKILL: a task is never finished first), reap them, and let
    the pool's manager thread mark the pool broken before it is shut down. Nothing is
    cancelled: on Python 3.11 a future cancelled while that thread fails it raises
    InvalidStateError there, a traceback on the way out."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(OSError, ValueError):
            proc.kill()
    for proc in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            proc.join(REAP_TIMEOUT_S)
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None and manager is not threading.current_thread():
        manager.join(REAP_TIMEOUT_S)
    pool.shutdown(wait=False)
    log.debug("killed %d worker process(es)", len(processes))
