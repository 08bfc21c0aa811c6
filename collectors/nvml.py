"""Background NVML sampler: one daemon thread per process, chunked ``.npz`` output.

Files: ``nvml/rank{R}.{C}.npz`` (see docs/run-directory.md), each written via a temp name
and a rename, every ``chunk_s`` seconds of samples and at stop, so a crash loses at most
one chunk. Timestamps are ``time.time_ns()`` (epoch ns, the clock Kineto uses).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from profkit.collectors.atomic import write_bytes_atomic
from profkit.collectors.nvml_read import BASE_COLUMNS, GPM_COLUMNS, GpuReader

log = logging.getLogger(__name__)

NVML_DIR = "nvml"
CHUNK_NAME = "rank{rank}.{chunk}.npz"
SOURCE_NVML, SOURCE_DCGM = 0, 1
_warned = False


def warn_once(message: str) -> None:
    """Log the 'NVML unavailable' warning once per process."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("profkit: %s; GPU counters will not be sampled", message)


def load_nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None (after one warning) when unusable."""
    try:
        import pynvml
    except ImportError:
        warn_once("pynvml (package nvidia-ml-py) is not installed")
        return None
    return init_nvml(pynvml)


def init_nvml(nvml: Any) -> Any | None:
    """``nvml.nvmlInit()``; None (after one warning) on any failure (no driver, AMD, ...)."""
    try:
        nvml.nvmlInit()
        return nvml
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound and friends
        warn_once(f"NVML unavailable ({e})")
        return None


class NvmlSampler:
    """Samples ``gpus`` (NVML indices or UUIDs) at ``hz`` into ``out_dir/nvml``.

    ``nvml`` (a pynvml-like object, already initialised), ``clock`` (epoch ns) and
    ``sleep`` (seconds) are injectable for tests; ``sleep`` defaults to a wait that
    :meth:`stop` interrupts.
    """

    def __init__(self, out_dir: str | Path, rank: int, gpus: Sequence[int | str], *,
                 hz: float = 10.0, nvml: Any = None, clock: Callable[[], int] = time.time_ns,
                 sleep: Callable[[float], Any] | None = None, chunk_s: float = 30.0,
                 dcgm: Any = None):
        self.dir = Path(out_dir) / NVML_DIR
        self.rank, self.gpus, self.period = rank, list(gpus), 1.0 / max(hz, 1e-3)
        self.nvml, self.clock, self.chunk_ns = nvml, clock, int(chunk_s * 1e9)
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self.dcgm = dcgm
        self.readers: list[GpuReader] = []
        self.columns: tuple[str, ...] = BASE_COLUMNS
        self.chunks_written: list[Path] = []
        self._rows: list[tuple] = []
        self._last_flush_ns = 0
        self._thread: threading.Thread | None = None
        self.errors = 0

    def open(self) -> bool:
        """Create the GPU readers; False (one warning) when no GPU can be sampled."""
        if self.nvml is not None:
            for gpu in self.gpus:
                try:
                    self.readers.append(GpuReader(self.nvml, gpu))
                except Exception as e:  # noqa: BLE001
                    warn_once(f"cannot open GPU {gpu!r} in NVML ({e})")
        if any(r.gpm.supported for r in self.readers):
            self.columns = BASE_COLUMNS + GPM_COLUMNS
        self._last_flush_ns = self.clock()
        return bool(self.readers) or self.dcgm is not None

    def start(self) -> bool:
        """Open and start the daemon thread; False when there is nothing to sample."""
        if not self.open():
            return False
        self._thread = threading.Thread(target=self._run, name="profkit-nvml", daemon=True)
        self._thread.start()
        return True

    def sample_once(self) -> None:
        """Append one row per GPU (and any DCGM rows that are due)."""
        now = self.clock()
        for r in self.readers:
            row = r.read(now)
            self._rows.append((now, r.index, SOURCE_NVML, *(row.get(c, np.nan)
                                                            for c in self.columns)))
        if self.dcgm is not None:
            for gpu, row in self.dcgm.poll(now):
                self._rows.append((now, gpu, SOURCE_DCGM, *(row.get(c, np.nan)
                                                            for c in self.columns)))

    def maybe_flush(self) -> Path | None:
        """Write a chunk when ``chunk_s`` of samples have accumulated."""
        if self.clock() - self._last_flush_ns >= self.chunk_ns:
            return self.flush()
        return None

    def flush(self) -> Path | None:
        """Write the buffered rows as the next chunk (atomically); None if empty."""
        self._last_flush_ns = self.clock()
        rows, self._rows = self._rows, []
        if not rows:
            return None
        cols = list(zip(*rows, strict=True))
        arrays = {"ts_ns": np.asarray(cols[0], dtype=np.int64),
                  "gpu": np.asarray(cols[1], dtype=np.int32),
                  "source": np.asarray(cols[2], dtype=np.int8)}
        for i, name in enumerate(self.columns):
            arrays[name] = np.asarray(cols[3 + i], dtype=np.float64)
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        path = self.dir / CHUNK_NAME.format(rank=self.rank, chunk=len(self.chunks_written))
        write_bytes_atomic(path, buf.getvalue())
        self.chunks_written.append(path)
        return path

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
                self.maybe_flush()
            except Exception:  # noqa: BLE001 - the sampler must never kill the job
                self.errors += 1
                if self.errors == 1:
                    log.warning("profkit: NVML sampling error", exc_info=True)
            next_t += self.period
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t, delay = time.monotonic(), 0.0
            self._sleep(delay)

    def stop(self) -> list[Path]:
        """Stop the thread, write the last chunk, release GPM buffers; the chunk paths."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        try:
            self.flush()
        finally:
            for r in self.readers:
                r.close()
        return self.chunks_written
