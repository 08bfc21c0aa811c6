"""Process pools that Ctrl-C stops at once.

A terminal's Ctrl-C sends SIGINT to every process of the command. A worker that took it
would die with a traceback in the middle of a task, or between tasks inside
multiprocessing's own receive, and the pool's shutdown could then wait for ever; a worker
that did not take it would finish its task (seconds) before the command could exit. So the
workers ignore SIGINT (they start with it blocked, then ignore it: a Ctrl-C while they start
is not lost to them either), only this process takes it, and leaving the pool's block by an
exception (KeyboardInterrupt, GeneratorExit, an error) kills the workers instead of waiting
for them, cancels what is queued and reaps them, so that no worker outlives the command.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor

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


def _ignore_sigint() -> None:
    """Worker initializer: the parent alone handles Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(AttributeError, OSError, ValueError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def process_pool(workers: int, *, on_kill: Callable[[], None] | None = None
                 ) -> Iterator[ProcessPoolExecutor]:
    """A process pool of ``workers`` whose workers ignore SIGINT. Submit the work with
    :func:`sigint_blocked` held (the first submit starts the workers). Leaving the block
    normally waits for the workers; leaving it by any exception kills them, then calls
    ``on_kill`` (to remove what killed workers left half written) and re-raises."""
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_ignore_sigint)
    try:
        yield pool
    except BaseException:
        with sigint_blocked():  # a second Ctrl-C must not cut the clean-up short
            kill_workers(pool)
            if on_kill is not None:
                on_kill()
        raise
    pool.shutdown(wait=True)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's workers (SIGKILL: a task is never finished first), cancel queued
    work and reap the workers."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(OSError, ValueError):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            proc.join(REAP_TIMEOUT_S)
    log.debug("killed %d worker process(es)", len(processes))
