"""The profiler a user's ``on_trace_ready`` sees once profkit has saved the cycle's trace.

Kineto saves a cycle's trace only once (torch 2.13 raises "Trace is already saved" on a
second ``export_chrome_trace``), so a user handler such as
``torch.profiler.tensorboard_trace_handler`` would crash the job after profkit's own
export. This view answers ``export_chrome_trace`` with a copy of the file profkit wrote
and passes everything else to the profiler.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from typing import Any

from profkit.atomic import atomic_open


class SavedTraceView:
    """``prof`` whose ``export_chrome_trace(path, ...)`` copies ``saved`` (a gzip Kineto
    trace): gzip as is to a ``.gz`` path, decompressed to any other path."""

    def __init__(self, prof: Any, saved: Path):
        self._prof, self._saved = prof, Path(saved)

    def export_chrome_trace(self, path: str, *args: Any, **kwargs: Any) -> None:
        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        opener = open if dest.name.endswith(".gz") else gzip.open
        with atomic_open(dest) as out, opener(self._saved, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prof, name)
