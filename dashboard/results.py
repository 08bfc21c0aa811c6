"""Server-side results: loaded runs, analyses and diffs, cached in memory keyed by run key
and the fingerprint of the run's files (so a changed run is re-read, an unchanged one never).
A run is read with :func:`~profkit.dashboard.loading.load`: a rank that breaks the analysis
is set aside, and a run that cannot be read is cached as its error. The browser holds only
keys and selections."""

from __future__ import annotations

import logging
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profkit.dashboard import loading
from profkit.dashboard.registry import RunEntry, RunRegistry

from profkit import cache

log = logging.getLogger(__name__)
MAX_ITEMS = 24  # runs, analyses and diffs together


class UnknownRun(LookupError):
    """A key that names no configured run."""


class ResultCache:
    """An LRU of results, computed at most once per key even under concurrent requests."""

    def __init__(self, registry: RunRegistry, max_items: int = MAX_ITEMS):
        self.registry = registry
        self.max_items = max_items
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}

    def entry(self, key: object) -> RunEntry:
        entry = self.registry.get(key)
        if entry is None:
            raise UnknownRun(str(key))
        return entry

    def get_or_compute(self, cache_key: tuple, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if cache_key in self._items:
                self._items.move_to_end(cache_key)
                return self._items[cache_key]
            key_lock = self._key_locks.setdefault(cache_key, threading.Lock())
        with key_lock:
            with self._lock:
                if cache_key in self._items:
                    return self._items[cache_key]
            value = compute()
            with self._lock:
                self._items[cache_key] = value
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
                self._key_locks.pop(cache_key, None)
        return value

    def peek(self, kind: str, key: str) -> Any | None:
        """A cached result without computing it (any fingerprint)."""
        with self._lock:
            for k, v in reversed(self._items.items()):
                if k[0] == kind and k[1] == key:
                    return v
        return None

    def fingerprint(self, key: str) -> str:
        return cache.run_fingerprint(self.entry(key).path)

    def loaded(self, key: str) -> tuple:
        """``(run, analysis)`` of the run under ``key``: the run as the dashboard shows it
        (ranks whose analysis failed listed in ``run.skipped``) and its analysis. Raises
        :class:`~profkit.dashboard.loading.RunReadError` when nothing of it can be shown."""
        entry = self.entry(key)
        value = self.get_or_compute(("run", key, self.fingerprint(key)),
                                    lambda: loading.load(entry.path))
        if isinstance(value, loading.RunReadError):
            raise loading.RunReadError(str(value))  # a fresh one: no traceback piles up
        return value

    def peek_analysis(self, key: str):
        """The run's analysis if it is cached (None while it is not, or when it failed)."""
        value = self.peek("run", key)
        return None if value is None or isinstance(value, Exception) else value[1]

    def run(self, key: str):
        return self.loaded(key)[0]

    def analysis(self, key: str):
        return self.loaded(key)[1]

    def diff(self, base: str, new: str):
        """``profkit diff`` of two runs, from their cached analyses."""
        from profkit.analyzers.diff import diff_analyses

        ck = ("diff", base, self.fingerprint(base), new, self.fingerprint(new))
        return self.get_or_compute(ck, lambda: diff_analyses(self.analysis(base),
                                                             self.analysis(new)))

    def merged_trace(self, key: str) -> tuple[str, bytes]:
        """(file name, gzip bytes) of the run's merged Perfetto trace, via a temp file."""
        from profkit.merge import merge_run

        entry = self.entry(key)
        name = f"{entry.path.name}.merged.json.gz"
        with tempfile.TemporaryDirectory(prefix="profkit-dash-") as tmp:
            out = Path(tmp) / name
            merge_run(self.run(key), out)
            return name, out.read_bytes()
