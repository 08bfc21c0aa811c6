"""The first named run's analysis, started as ``profkit dashboard RUN`` starts: before Dash
and the pages are loaded, in a process of its own.

``profkit dashboard`` loaded Dash (~1 s), served the index page, then loaded pandas, the
analysis code and the pages (~1 s more) before its :class:`~profkit.dashboard.server.results.
ResultCache` started analysing the named runs; on a large run that analysis is what the
Overview's verdict waits for. Now the analysis code is loaded first and the first named run
is analysed as ``ResultCache`` would (:func:`~profkit.dashboard.server.runpool.
analyse_and_keep`: ``profkit analyze``'s map and reduce, kept in the run's result cache;
nothing when it is kept there already) in a process forked from this one while it has no
other thread, its map in processes forked from that one (the code loaded once, not again in
a forkserver); Dash loads meanwhile. For a small run too: the page is served ~0.4 s later
(pandas first), but the forkserver's loading is left out of the first view (A/B on
stock_ddp under load 5-7: 3.64 s against 4.69 s; under load 3-5: 2.66 against 2.42). The forkserver of
the server's later pools is started :data:`FORKSERVER_AFTER_S` after this analysis has
ended, so that its own loading of the analysis code (~0.8 CPU s) takes the CPU neither from
the analysis nor from drawing the first view. The result cache then finds the analysis on
disk (:func:`wait`), under the key it would have kept it under itself.

Only the standard library and :mod:`profkit.children` are imported with this module.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path

from profkit import children

log = logging.getLogger(__name__)
_started: dict[Path, Future] = {}  # resolved run path -> its analysis (None or the error)
_lock = threading.Lock()
FORKSERVER_AFTER_S = 2.0  # the forkserver is started this long after the analysis ended


def start(runs: list[Path]) -> bool:
    """Start analysing the first of ``runs`` (named on the command line) in a process of
    its own, forked from this one with the analysis code loaded (imported here: ~0.6 s);
    the others are left to the result cache. Call while this process has no other thread
    (a process forked while another thread holds a lock may wait for it forever), after
    :func:`profkit.children.start_workers_by` chose the forkserver with ``start_now=False``.
    Whether it started: the forkserver is started a while after this analysis has ended;
    if none started, start it (see the module doc)."""
    if not runs or children.start_method() != "forkserver":
        return False
    # what the analysis needs, loaded before the fork (the server needs it too)
    import profkit.analyzers.executor  # noqa: F401
    from profkit.dashboard.server import results, runpool  # noqa: F401

    from profkit.run.pool import kill_workers, sigint_blocked

    path = Path(runs[0]).resolve()
    done: Future = Future()
    with _lock:
        _started[path] = done
    pool = children.process_pool(1, "fork")
    with sigint_blocked():
        task = pool.submit(analyse_named, str(path))  # forks the worker, in this thread

    def wait_for_it() -> None:
        try:
            done.set_result(task.result())
            pool.shutdown(wait=False)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            kill_workers(pool)
            done.set_exception(exc)
        # not at once: its loading would take the CPU from the first view's drawing (a
        # pool that needs it sooner starts it itself)
        time.sleep(FORKSERVER_AFTER_S)
        children.start_forkserver()

    threading.Thread(target=wait_for_it, name="profkit-early-run", daemon=True).start()
    return True


def running() -> bool:
    """Whether an early analysis has not ended yet."""
    with _lock:
        return any(not done.done() for done in _started.values())


def analyse_named(path: str) -> str | None:
    """In the worker: analyse the run at ``path`` and keep what its pages show under the
    key the server's result cache looks it up by (nothing to do when it is kept there
    already); None, or the message of the error that is all that can be shown of it."""
    from profkit.dashboard.server import results, runpool

    from profkit.run import cache

    # the map's workers forked from here, with the analysis code loaded: this process has
    # no other thread that could hold a lock
    children.start_workers_by("fork")
    key = results.disk_key(cache.run_fingerprint(Path(path)), results.code_fingerprint())
    if results.kept_result(Path(path), key) is not None:  # the server reads it back itself
        return None
    return runpool.analyse_and_keep(path, key)


def wait(path: Path) -> tuple[bool, str | None]:
    """Whether an early analysis of the run at ``path`` (resolved) ran, once it has ended,
    and its error message (None: kept in the run's result cache). Answers True once; a
    worker that died (killed for memory, ...) is (False, None): analyse it elsewhere."""
    with _lock:
        done = _started.pop(path, None)
    if done is None:
        return False, None
    try:
        return True, done.result()
    except Exception as exc:  # noqa: BLE001 - the server analyses the run itself
        log.warning("%s: the early analysis failed (%s); analysing it in the server",
                    path, f"{type(exc).__name__}: {exc}")
        return False, None
