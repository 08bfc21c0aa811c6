"""Server-side results: what the pages show of each run, its events, diffs, cached in memory
keyed by run key and the fingerprint of the run's files (so a changed run is re-read, an
unchanged one never). The browser holds only keys and selections.

What a run's pages show without its events (:class:`~profkit.dashboard.server.loading.Shown`: the
analysis, made as ``profkit analyze`` makes it, and the Runs table's facts) is also kept on disk with the run's result cache
(:func:`profkit.run.cache.store_result`, data only, never pickle), under the fingerprint of the
run's files and of profkit's code: a restarted dashboard shows an unchanged run without
reading its traces. The events are read (from the ingest cache the analysis wrote) only for
the pages that draw them, when they are first asked for, and only a few runs' events are
held at once: they are the large part.

The Runs page asks for every run at once: :meth:`ResultCache.prefetch` analyses them in the
background (:mod:`~profkit.dashboard.server.background`) in the order the page shows them, the first
rows first, several at once (:func:`~profkit.dashboard.server.runpool.pool_size`): a small run
in a process of a bounded pool (:mod:`~profkit.dashboard.server.runpool`), a large one in a
thread (its traces are summarised in processes of their own), one large run at a time; the
page shows each one as it finishes.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profkit.dashboard.server import early_runs, loading, runpool
from profkit.dashboard.server.background import ANALYSING, QUEUED, Background  # noqa: F401 (states)
from profkit.dashboard.server.registry import RunEntry, RunRegistry
from profkit.dashboard.server.runpool import SMALL_RUN_BYTES, RunPool, pool_size

from profkit.errors import ProfkitError
from profkit.run import cache, discover
from profkit.run.loader import GZIP_EXPANSION, memory_safe_workers

log = logging.getLogger(__name__)
MAX_ITEMS = 48  # analyses, diffs and tables derived from them
MAX_RUNS = 3  # runs held with their events (every rank's events: the large items)
MAX_PAGES = 16  # run pages as drawn: a second view of one is sent without drawing it again
DONE, FAILED = "done", "failed"
# Runs analysed at once in the background: small ones each in a process of the run pool
# (in threads of this process they would mostly wait for each other: the GIL), large ones one
# at a time (each spreads its files over a pool of processes already).
BACKGROUND_THREADS = pool_size()


class UnknownRun(LookupError):
    """A key that names no configured run."""


class Lru:
    """A least-recently-used map of results, each computed at most once even under
    concurrent requests."""

    def __init__(self, max_items: int):
        self.max_items = max_items
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}

    def get(self, key: tuple) -> Any | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: tuple, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)

    def get_or_compute(self, key: tuple, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:
                    return self._items[key]
            value = compute()
            self.put(key, value)
            with self._lock:
                self._key_locks.pop(key, None)
        return value

    def latest(self, match: Callable[[tuple], bool]) -> Any | None:
        with self._lock:
            return next((v for k, v in reversed(self._items.items()) if match(k)), None)


def code_fingerprint() -> str:
    """Changes whenever profkit's code does: a result kept on disk by other code is not
    shown."""
    import profkit.analyzers
    import profkit.dashboard

    import profkit
    from profkit.classify import events as classify

    code = cache.code_fingerprint(*(Path(p.__file__).parent
                                    for p in (profkit, profkit.analyzers, profkit.dashboard)))
    return f"dashboard|{profkit.__version__}|{code}|{classify.rules_fingerprint()}"


def disk_key(fp: str, code: str) -> str:
    """The result cache's key of a run whose files have fingerprint ``fp``, analysed by
    the code of :func:`code_fingerprint` ``code``."""
    return hashlib.sha1(f"{fp}|{code}".encode()).hexdigest()[:24]


def kept_result(path: Path, disk_key: str):
    """What the run's result cache keeps under ``disk_key``, while still valid; None."""
    kept = cache.load_result(path, disk_key, loading.Shown)
    return kept if kept is not None and kept.valid() else None


def run_json_bytes(path: Path) -> int:
    """About how many bytes of JSON the run's traces hold (gzip expanded), for the memory
    budget of the background analyses."""
    try:
        files = discover.find_trace_files(path)[0]
        return sum(f.stat().st_size * (GZIP_EXPANSION if f.name.endswith(".gz") else 1)
                   for f in files)
    except (OSError, ProfkitError):  # a folder gone since: it costs nothing to read
        return 0


class ResultCache:
    """The results of the configured runs (see the module doc)."""

    def __init__(self, registry: RunRegistry, max_items: int = MAX_ITEMS,
                 max_runs: int = MAX_RUNS, persist: bool = True, background: bool = True):
        self.registry = registry
        # False: the Runs page analyses no run of its own accord (each is analysed when one
        # of its pages is opened); the runs named on the command line still are, at start
        self.background = background
        self.persist = persist
        self._items = Lru(max_items)
        self._runs = Lru(max_runs)
        self._pages = Lru(MAX_PAGES)
        self._code = code_fingerprint()
        self._lock = threading.Lock()
        self._background = Background(self._analyse)
        self._sizes: dict[str, int] = {}  # run key -> bytes of JSON its traces hold
        self.background_threads = BACKGROUND_THREADS
        self._pool = RunPool(BACKGROUND_THREADS)
        self._large = threading.Lock()  # one large run's analysis at a time
        self._summaries: dict[str, tuple[str, Any]] = {}  # run key -> (fingerprint, Summary)

    # --- generic ---------------------------------------------------------------------
    def entry(self, key: object) -> RunEntry:
        entry = self.registry.get(key)
        if entry is None:
            raise UnknownRun(str(key))
        return entry

    def get_or_compute(self, cache_key: tuple, compute: Callable[[], Any]) -> Any:
        return self._items.get_or_compute(cache_key, compute)

    def peek(self, kind: str, key: str) -> Any | None:
        """A cached result without computing it (any fingerprint)."""
        return self._items.latest(lambda k: k[0] == kind and k[1] == key)

    def fingerprint(self, key: str) -> str:
        return cache.run_fingerprint(self.entry(key).path)

    # --- what a run's pages show -------------------------------------------------------
    def shown(self, key: str, make: Callable | None = None) -> loading.Shown:
        """The analysis and facts of the run under ``key``: from memory, else from the disk
        cache, else read and analysed (by ``make(entry, fingerprint)``, default here).
        Raises :class:`~profkit.dashboard.server.loading.RunReadError` when nothing of it
        can be shown."""
        entry = self.entry(key)
        fp = self.fingerprint(key)
        make = make or self._show
        value = self._items.get_or_compute(("shown", key, fp), lambda: make(entry, fp))
        with self._lock:
            self._summaries[key] = (fp, loading.Summary.of(value)
                                    if isinstance(value, loading.Shown) else value)
        if isinstance(value, loading.RunReadError):
            raise loading.RunReadError(str(value))  # a fresh one: no traceback piles up
        return value

    def _disk_key(self, fp: str) -> str:
        return disk_key(fp, self._code)

    def _kept(self, entry: RunEntry, disk_key: str):
        return kept_result(entry.path, disk_key)

    def _early(self, entry: RunEntry, disk_key: str):
        """What the early analysis of the run (:mod:`~profkit.dashboard.server.early_runs`,
        started with the server) kept, once it has ended, or its error; None when there was
        none (or it kept nothing under ``disk_key``: the files changed since)."""
        ran, problem = early_runs.wait(entry.path)
        if not ran:
            return None
        return loading.RunReadError(problem) if problem is not None else \
            self._kept(entry, disk_key)

    def _show(self, entry: RunEntry, fp: str):
        disk_key = self._disk_key(fp)
        if self.persist:
            kept = self._kept(entry, disk_key) or self._early(entry, disk_key)
            if kept is not None:
                log.debug("%s: shown from the result cache", entry.path)
                return kept
        shown = loading.show(entry.path)
        if self.persist and isinstance(shown, loading.Shown):
            cache.store_result(entry.path, disk_key, shown)
        return shown

    def analysis(self, key: str):
        return self.shown(key).analysis

    def facts(self, key: str) -> dict[str, Any]:
        return self.shown(key).facts

    def peek_shown(self, key: str):
        """The run's Shown if it is in memory for its current files, its RunReadError if
        it failed, None while it is not known yet."""
        try:
            return self._items.get(("shown", key, self.fingerprint(key)))
        except (UnknownRun, OSError):
            return None

    def peek_summary(self, key: str):
        """What the Runs table shows of the run (a
        :class:`~profkit.dashboard.server.loading.Summary`) if it was analysed for its
        current files, its RunReadError if it failed, None while it is not known yet. Kept
        for every run, so that more runs than the memory holds analyses of still fill the
        table once each."""
        try:
            fp = self.fingerprint(key)
        except (UnknownRun, OSError):
            return None
        with self._lock:
            kept = self._summaries.get(key)
        return kept[1] if kept is not None and kept[0] == fp else None

    def peek_analysis(self, key: str):
        """The run's analysis if it is cached (None while it is not, or when it failed)."""
        value = self.peek_shown(key)
        return value.analysis if isinstance(value, loading.Shown) else None

    # --- the events ----------------------------------------------------------------------
    def run(self, key: str):
        """The run under ``key`` with its events, as it was analysed (the same ranks set
        aside); raises RunReadError when it cannot be read."""
        shown = self.shown(key)
        entry, fp = self.entry(key), self.fingerprint(key)
        value = self._runs.get_or_compute(("run", key, fp),
                                          lambda: loading.reload(entry.path, shown))
        if isinstance(value, loading.RunReadError):
            raise loading.RunReadError(str(value))
        return value

    def loaded(self, key: str) -> tuple:
        """``(run, analysis)`` of the run under ``key``."""
        analysis = self.analysis(key)
        return self.run(key), analysis

    # --- background analysis ---------------------------------------------------------------
    def state(self, key: str) -> str:
        """QUEUED, ANALYSING, DONE or FAILED; "" when nobody asked for it yet."""
        return self.summary_state(key)[1]

    def summary_state(self, key: str) -> tuple[Any, str]:
        """:meth:`peek_summary`'s value and :meth:`state`, from one look at the summary: a
        run whose analysis ends between two looks is never called done without it."""
        value = self.peek_summary(key)
        if value is not None:
            return value, FAILED if isinstance(value, loading.RunReadError) else DONE
        return None, self._background.state(key)

    def prefetch(self, keys: list[str]) -> None:
        """Analyse the runs under ``keys`` that are not known yet in the background, in
        this order (the order a page shows them), ahead of any others still waiting; as
        many at once as :data:`BACKGROUND_THREADS` and the free memory allow."""
        unknown = [k for k in keys if self.peek_summary(k) is None]
        if not unknown:
            return
        with self._lock:
            for k in unknown:
                if k not in self._sizes:
                    self._sizes[k] = run_json_bytes(self.entry(k).path)
            sizes = [self._sizes[k] for k in unknown]
        self._background.want(unknown, memory_safe_workers(
            sizes, min(len(unknown), self.background_threads)))

    def prefetch_listed(self, keys: list[str]) -> None:
        """:meth:`prefetch` the runs a page lists, unless this cache analyses no run in the
        background (``background=False``)."""
        if self.background:
            self.prefetch(keys)

    def prefetch_named(self, runs: list[Path]) -> None:
        """:meth:`prefetch` the configured runs at ``runs`` (named on the command line)."""
        named = {Path(r).resolve() for r in runs}
        self.prefetch([e.key for e in self.registry.entries() if e.path in named])

    def _analyse(self, key: str) -> None:
        try:
            small = (self.persist and self._sizes.get(key, 0) <= SMALL_RUN_BYTES
                     and runpool.usable())
            if small:
                self.shown(key, self._show_in_pool)
            else:
                with self._large:
                    self.shown(key)
        except Exception as exc:  # cached as the run's error; never ends the queue
            log.debug("%s: %s", key, loading.describe(exc))

    def _show_in_pool(self, entry: RunEntry, fp: str):
        """:meth:`_show`, the analysis made in a process of the run pool and read back from
        the result cache it wrote there (in this thread when the worker died or could not
        keep it)."""
        disk_key = self._disk_key(fp)
        kept = self._kept(entry, disk_key) or self._early(entry, disk_key)
        if kept is not None:
            return kept
        try:
            problem = self._pool.analyse(entry.path, disk_key)
        except Exception as exc:  # a worker killed (for memory, ...): analyse it here
            log.warning("%s: the analysis process failed (%s); analysing it in the server",
                        entry.path, loading.describe(exc))
            return self._show(entry, fp)
        if problem is not None:
            return loading.RunReadError(problem)
        return self._kept(entry, disk_key) or self._show(entry, fp)

    def page(self, tab: str, key: str, draw: Callable[[], Any]) -> Any:
        """A run page (``tab``) as ``draw()`` draws it, drawn once for the run's files: a
        page is a function of the run's files and profkit's code (its callbacks change the
        browser's copy, never this one). A page that cannot be drawn raises, and is not
        kept."""
        return self._pages.get_or_compute(("page", tab, key, self.fingerprint(key)), draw)

    # --- derived -----------------------------------------------------------------------
    def diff(self, base: str, new: str):
        """``profkit diff`` of two runs, from their cached analyses."""
        from profkit.analyzers.compare.diff import diff_analyses

        ck = ("diff", base, self.fingerprint(base), new, self.fingerprint(new))
        return self.get_or_compute(ck, lambda: diff_analyses(self.analysis(base),
                                                             self.analysis(new)))

    def merged_trace(self, key: str) -> tuple[str, bytes]:
        """(file name, gzip bytes) of the run's merged Perfetto trace, via a temp file."""
        from profkit.timeline.merge import merge_run

        entry = self.entry(key)
        name = f"{entry.path.name}.merged.json.gz"
        with tempfile.TemporaryDirectory(prefix="profkit-dash-") as tmp:
            out = Path(tmp) / name
            merge_run(self.run(key), out)
            return name, out.read_bytes()
