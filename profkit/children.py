"""The processes a profkit command starts, and ending them when the command is stopped.

Two guards, so that no worker outlives the command that started it:

- :func:`process_pool` starts the workers of a pool (the loader's parsing of traces, the
  analyzers' map over ranks) so that each one asks the kernel to kill it when its parent
  dies (Linux ``PR_SET_PDEATHSIG``), however the parent dies (``kill -9`` too), and ignores
  Ctrl-C (the parent ends it; a traceback from every worker says nothing). They are forked
  from this process, or, once :func:`start_workers_by` chose it (the dashboard, whose
  threads may hold locks a forked worker would wait on forever), from a forkserver of ours.
- :class:`SignalStop` (installed by the ``profkit`` program for every command but
  ``launch``, which forwards SIGTERM to its job and waits for it) makes SIGTERM and SIGINT
  end every process below this one at once (:func:`end_children`: SIGTERM, then SIGKILL
  after :data:`GRACE_S`), unwind the main thread, and end the process by that signal, so
  that a command stopped by systemd, ``docker stop``, ``kill`` or Ctrl-C is gone, with its
  workers, within about a second, also while background threads are busy (the dashboard's
  analyses of its runs).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)
GRACE_S = 0.5  # a worker asked to stop (SIGTERM) is killed after this long
KILLED_WITHIN_S = 2.0  # a killed process is waited for this long, at most
EXIT_AFTER_S = 1.5  # a stopped command still unwinding then is ended all the same
RAISE_AGAIN_AFTER_S = 0.01  # a stop Python dropped is raised again this much later
OWNER_POLL_S = 0.2  # without pidfds: how often a forkserver's worker looks for its owner
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int | None, owner_pid: int | None = None) -> None:
    """Pool initializer: be killed when the parent dies; leave Ctrl-C to the parent; end
    at once on SIGTERM (not by the handler a fork copied from the parent's SignalStop).
    A forkserver's worker also ends when ``owner_pid`` (the process whose pool it serves)
    does: the server outlives its owner as long as any worker of it lives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if owner_pid is not None:
        _exit_with(owner_pid)
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: SignalStop still ends the workers
        return
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before prctl took effect


def _exit_with(pid: int) -> None:
    """End this process as soon as process ``pid`` ends (a daemon thread waiting on it:
    a pidfd where Linux has them, else a look every :data:`OWNER_POLL_S`)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None

    def wait() -> None:
        if fd is not None:
            import select

            select.select([fd], [], [])  # readable once the process has ended
        else:
            while _exists(pid):
                time.sleep(OWNER_POLL_S)
        os._exit(1)

    threading.Thread(target=wait, name="profkit-owner", daemon=True).start()


def _exists(pid: int) -> bool:
    if Path("/proc/self/stat").exists():
        return alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        pass
    return True


_start_method: list[str] = []  # how later pools start their workers (empty: the default)


def start_workers_by(method: str | None, preload: tuple[str, ...] = (),
                     start_now: bool = True) -> None:
    """Start the workers of later pools by ``method`` (None: the platform's default, fork
    on Linux). A process with threads at work (the dashboard's server and background
    analyses) uses "forkserver": a worker forked from it while another thread held a lock
    (an import's, say) would wait for that lock forever. The server process is started here,
    at once, and imports ``preload`` (the analysis code) while the caller goes on, so that
    each worker forked from it later starts with that code loaded. ``start_now=False``:
    the server is started by the first pool that needs it, or :func:`start_forkserver`."""
    _start_method[:] = [method] if method else []
    if method == "forkserver":
        multiprocessing.get_context(method).set_forkserver_preload(list(preload))
        if start_now:
            start_forkserver()


def start_forkserver() -> None:
    """Start the forkserver (it loads its preload), unless it is running."""
    from multiprocessing import forkserver

    forkserver.ensure_running()


def start_method() -> str | None:
    """How later pools start their workers (:func:`start_workers_by`; None: the default)."""
    return _start_method[0] if _start_method else None


def process_pool(max_workers: int, method: str | None = None) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process (see the module doc), started by
    ``method`` (default: :func:`start_method`'s)."""
    context = multiprocessing.get_context(method or start_method())
    # a forkserver's workers are its children, not ours: they watch this process instead
    served = context.get_start_method() == "forkserver"
    initargs = (None, os.getpid()) if served else (os.getpid(),)
    return ProcessPoolExecutor(max_workers=max_workers, mp_context=context,
                               initializer=_die_with_parent, initargs=initargs)


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this one), children first (Linux /proc;
    elsewhere only this process's multiprocessing children)."""
    pid = os.getpid() if pid is None else pid
    parents = _parent_map()
    if parents is None:
        return [p.pid for p in multiprocessing.active_children() if p.pid] \
            if pid == os.getpid() else []
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        kids = [child for child, parent in parents.items() if parent == here]
        found += kids
        todo += kids
    return found


def _parent_map() -> dict[int, int] | None:
    """{pid: parent pid} of every process that is not a zombie; None without /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    out = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) "
        if fields and fields[0] != "Z":
            out[int(entry.name)] = int(fields[1])
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] != "Z"


def end_children(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM every process below this one, SIGKILL those still there after ``grace_s``
    (one that ignores SIGTERM, as multiprocessing's resource tracker does), and wait up to
    :data:`KILLED_WITHIN_S` for those to be gone: a kill is delivered, not done, when
    ``os.kill`` returns. Returns the pids it signalled."""
    pids = descendants()
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    _wait_gone(pids, grace_s)
    killed = [p for p in pids if alive(p)] + [p for p in descendants() if p not in pids]
    for pid in killed:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(killed, KILLED_WITHIN_S)
    return pids


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread by :class:`SignalStop`. A KeyboardInterrupt, so that
    servers that let Ctrl-C through (waitress) let it through too."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _StopAgain(Stopped):
    """The stop raised again in the main thread after Python dropped it (an asynchronous
    exception is raised from its class, without arguments)."""

    def __init__(self, signum: int | None = None):
        super().__init__(signum or stop_signal() or signal.SIGINT)


_stopping: list[int] = []  # the signal a SignalStop of this process took, if any


def stop_signal() -> int | None:
    """The signal stopping this process (a :class:`SignalStop` took it), else None. Python
    drops an exception raised where it cannot propagate (a weakref callback of the import
    system, a finalizer), so code that meets the stop's echo (a pool whose workers it
    ended) raises :class:`Stopped` again instead of going on."""
    return _stopping[0] if _stopping else None


def _raise_in(thread_id: int) -> None:
    """Raise :class:`_StopAgain` in the thread ``thread_id`` (at its next bytecode)."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                                   ctypes.py_object(_StopAgain))


class SignalStop:
    """While inside (the main thread only), SIGTERM or SIGINT ends every process below this
    one and raises :class:`Stopped`; :attr:`signum` then names the signal, also when some
    code swallowed the exception (:func:`stop_signal`; Python's report of the dropped
    exception is not printed), and :meth:`exit` ends the process by it. A second signal
    ends the process at once (the default action is back). Once the work is done,
    :meth:`finish` makes the rest of the process's life deaf to these signals."""

    def __init__(self, signums: tuple[int, ...] = STOP_SIGNALS):
        self.signums = signums
        self.signum: int | None = None
        self.finished = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.signums}
            self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def finish(self) -> None:
        """The command's work is done and its exit status decided: a stop signal from now
        until the process ends is ignored (left ignored by :meth:`__exit__`). Python's
        shutdown puts its own handlers back to the default action, so a Ctrl-C in its last
        tens of milliseconds ended a finished command by the signal without a word."""
        self.finished = True
        if self._previous:
            for s in self.signums:
                signal.signal(s, signal.SIG_IGN)

    def __exit__(self, *exc_info) -> None:
        if self._previous:
            sys.unraisablehook = self._hook
        for s, previous in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                if not self.finished:
                    signal.signal(s, previous)
        self._previous = {}

    def _unraisable(self, unraisable) -> None:
        """A Stopped that Python dropped (raised in a weakref callback or a finalizer) is
        raised again in the main thread, once this hook and the callback have returned
        (from another thread: an asynchronous exception set here would fire in this hook);
        dropped again, it comes back again. No report is printed."""
        if not isinstance(unraisable.exc_value, Stopped):
            self._hook(unraisable)
        elif threading.current_thread() is threading.main_thread():
            again = threading.Timer(RAISE_AGAIN_AFTER_S, _raise_in, (threading.get_ident(),))
            again.daemon = True
            again.start()

    def _handle(self, signum: int, frame) -> None:
        if self.finished:  # came between finish()'s flag and its SIG_IGN
            return
        for s in self.signums:
            signal.signal(s, signal.SIG_DFL)
        self.signum = signum
        _stopping[:] = [signum]
        end_children()
        watchdog = threading.Timer(EXIT_AFTER_S, self._expire)  # should the unwinding hang
        watchdog.daemon = True
        watchdog.start()
        raise Stopped(signum)

    def _expire(self) -> None:
        with contextlib.suppress(Exception):
            print(f"profkit: stopped by {signal.Signals(self.signum).name}", file=sys.stderr)
        self.exit()

    def exit(self) -> None:
        """End every process below this one, then this one, by the signal that stopped it
        (background threads are not waited for: they would finish the work first)."""
        assert self.signum is not None
        end_children()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(ValueError):  # the watchdog's thread: _handle already did
            signal.signal(self.signum, signal.SIG_DFL)
        os.kill(os.getpid(), self.signum)
        time.sleep(1.0)  # the signal is delivered at once; this is never reached in practice
        os._exit(128 + self.signum)
