"""The runs the dashboard may show, each under an opaque key.

A URL names a run only by its key; a key resolves through this registry and nothing else,
so no URL can make the server read a path that was not configured (explicit run paths, or
run folders found under the configured roots).
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from profkit.run import discover

log = logging.getLogger(__name__)
SCAN_DEPTH = 3  # how deep under a root run folders are looked for
_SLUG_RE = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True)
class RunEntry:
    key: str  # opaque URL key: slug of the label + a hash of the resolved path
    path: Path  # resolved
    label: str  # e.g. "zoo/straggler" (relative to its root) or the folder name


def run_key(label: str, path: Path) -> str:
    slug = _SLUG_RE.sub("-", label.lower()).strip("-")[:40] or "run"
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


def is_run_folder(folder: Path) -> bool:
    """A profkit run directory (run.json), or a folder holding trace files itself or in
    ``traces/``."""
    if (folder / discover.RUN_JSON).is_file():
        return True
    for sub in (folder, folder / "traces"):
        try:
            if any(p.is_file() and discover.is_trace_name(p) for p in sub.iterdir()):
                return True
        except OSError:
            continue
    return False


def scan_root(root: Path, depth: int = 0) -> list[Path]:
    """Run folders under ``root`` (not descending into a run)."""
    if is_run_folder(root):
        return [root]
    if depth >= SCAN_DEPTH:
        return []
    found: list[Path] = []
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return []
    for child in children:
        if child.name.startswith(".") or child.name in discover.QUIET_DIRS:
            continue
        found.extend(scan_root(child, depth + 1))
    return found


class RunRegistry:
    """Explicit runs plus the runs found under roots; :meth:`rescan` picks up new ones."""

    def __init__(self, runs: list[Path], roots: list[Path]):
        self._runs = [Path(r).resolve() for r in runs]
        self._roots = [Path(r).resolve() for r in roots]
        self._entries: dict[str, RunEntry] = {}
        self._lock = threading.Lock()
        self.rescan()

    def rescan(self) -> list[RunEntry]:
        entries: dict[str, RunEntry] = {}
        for path in self._runs:
            self._add(entries, path, path.name)
        for root in self._roots:
            for path in scan_root(root):
                label = str(path.relative_to(root)) if path != root else path.name
                self._add(entries, path, label)
        with self._lock:
            self._entries = entries
        return self.entries()

    @staticmethod
    def _add(entries: dict[str, RunEntry], path: Path, label: str) -> None:
        entry = RunEntry(run_key(label, path), path, label)
        if all(e.path != path for e in entries.values()):
            entries[entry.key] = entry

    @property
    def roots(self) -> list[Path]:
        """The folders whose run folders are listed (resolved)."""
        return list(self._roots)

    def entries(self) -> list[RunEntry]:
        with self._lock:
            return list(self._entries.values())

    def get(self, key: object) -> RunEntry | None:
        """The run under ``key``, or None: keys are looked up, never turned into paths."""
        if not isinstance(key, str):
            return None
        with self._lock:
            return self._entries.get(key)
