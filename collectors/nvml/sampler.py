"""Background NVML sampler: one daemon thread per process, chunked ``.npz`` output.

Files: ``nvml/rank{R}.{C}.npz`` (see docs/run-directory.md), each written via a temp name
and a rename, every ``chunk_s`` seconds of samples and at stop, so a crash loses at most
one chunk. Timestamps are ``time.time_ns()`` (epoch ns, the clock Kineto uses). A chunk that
cannot be written (a full disk, ...) stops the sampling: it is reported once
(``on_write_failure``), never raised.

Two rates: the metrics at ``hz`` (10 Hz: under 1% of a core), and while the torch profiler
records, the cheap ones that can change within a step (SM clock, clock-event reasons,
instantaneous power, GPM when due) at ``active_hz`` in between, so that a ~30 ms profiled
step gets several samples. The costly cumulative counters (energy, per-link NVLink bytes)
are read where recording starts and stops, and energy every 5 s. Idle, the thread wakes
every ``WATCH_S`` to notice the profiler starting within a step.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from profkit.collectors.nvml.gpu_reader import BASE_COLUMNS, GPM_COLUMNS, GpuReader
from profkit.collectors.run_dir_writes import write_bytes_atomic

log = logging.getLogger(__name__)

NVML_DIR = "nvml"
CHUNK_NAME = "rank{rank}.{chunk}.npz"
SOURCE_NVML, SOURCE_DCGM = 0, 1
DEFAULT_ACTIVE_HZ = 200.0  # 5 ms: 6 samples in a 30 ms step
ACTIVE_HZ_ENV = "PROFKIT_NVML_ACTIVE_HZ"  # 0 turns the fast rate off
# Idle wake-ups notice the profiler starting within one ~30 ms step. Each costs ~40 us of
# CPU on an H100 host: ~0.16% of a core at 40 a second (bench/nvml_sampler_cost.py).
WATCH_S = 0.025
_warned = False


def torch_profiler_recording() -> bool:
    """True while a torch profiler in this process records (torch's own flag, a plain
    Python global readable from any thread); False when torch is not imported."""
    module = sys.modules.get("torch.autograd.profiler")
    return bool(getattr(module, "_is_profiler_enabled", False))


def active_hz_default() -> float:
    try:
        return float(os.environ.get(ACTIVE_HZ_ENV, DEFAULT_ACTIVE_HZ))
    except ValueError:
        log.warning("profkit: %s=%r is not a number; using %s Hz", ACTIVE_HZ_ENV,
                    os.environ[ACTIVE_HZ_ENV], DEFAULT_ACTIVE_HZ)
        return DEFAULT_ACTIVE_HZ


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
    """Samples ``gpus`` (NVML indices or UUIDs) into ``out_dir/nvml``: every metric at
    ``hz``, and the fast metrics at ``active_hz`` while ``is_active()`` (default: the torch
    profiler records; ``active_hz`` default ``$PROFKIT_NVML_ACTIVE_HZ`` or 200, 0 = off).

    ``nvml`` (a pynvml-like object, already initialised), ``clock`` (epoch ns) and
    ``sleep`` (seconds) are injectable for tests. Every wait is at most ``WATCH_S``, so
    ``time.sleep`` (half the CPU of an interruptible ``Event.wait`` per wake-up, measured
    on an H100 host) still lets :meth:`stop` return within one.

    ``on_write_failure(path, exc, samples)`` is told of the first chunk that cannot be
    written (default: one warning); the sampler then stops sampling and writes nothing
    more (:attr:`write_failure` says why).
    """

    def __init__(self, out_dir: str | Path, rank: int, gpus: Sequence[int | str], *,
                 hz: float = 10.0, nvml: Any = None, clock: Callable[[], int] = time.time_ns,
                 sleep: Callable[[float], Any] | None = None, chunk_s: float = 30.0,
                 dcgm: Any = None, active_hz: float | None = None,
                 is_active: Callable[[], bool] = torch_profiler_recording,
                 on_write_failure: Callable[[Path, BaseException, int], Any] | None = None):
        self.dir = Path(out_dir) / NVML_DIR
        self.rank, self.gpus, self.period = rank, list(gpus), 1.0 / max(hz, 1e-3)
        active_hz = active_hz_default() if active_hz is None else active_hz
        # no fast rate at or below the full rate
        self.active_period = 1.0 / active_hz if active_hz > hz else None
        self.is_active = is_active
        self.nvml, self.clock, self.chunk_ns = nvml, clock, int(chunk_s * 1e9)
        self._stop = threading.Event()
        self._sleep = sleep or time.sleep
        self.dcgm = dcgm
        self.readers: list[GpuReader] = []
        self.columns: tuple[str, ...] = BASE_COLUMNS
        self.chunks_written: list[Path] = []
        self._rows: list[tuple] = []
        self._last_flush_ns = 0
        self._last_full_ns: int | None = None
        self._was_active = False
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.on_write_failure = on_write_failure or self._warn_write_failure
        self.write_failure: BaseException | None = None

    def open(self) -> bool:
        """Create the GPU readers; False (one warning) when no GPU can be sampled."""
        if self.nvml is not None:
            for gpu in self.gpus:
                try:
                    self.readers.append(GpuReader(self.nvml, gpu))
                except Exception as e:  # noqa: BLE001
                    warn_once(f"cannot open GPU {gpu!r} in NVML ({e})")
        # in the readers' order (power, then each link's tx and rx), each column once
        fields = dict.fromkeys(c for r in self.readers for c in r.fields.columns)
        gpm = GPM_COLUMNS if any(r.gpm.supported for r in self.readers) else ()
        self.columns = BASE_COLUMNS + tuple(fields) + gpm
        self._last_flush_ns = self.clock()
        return bool(self.readers) or self.dcgm is not None

    def start(self) -> bool:
        """Open and start the daemon thread; False when there is nothing to sample."""
        if not self.open():
            return False
        self._thread = threading.Thread(target=self._run, name="profkit-nvml", daemon=True)
        self._thread.start()
        return True

    def sample_once(self, fast: bool = False, now: int | None = None,
                    counters: bool = False) -> None:
        """Append one row per GPU (and, for a full sample, any DCGM rows that are due).
        ``fast``: only the fast metrics, the other columns NaN; ``counters``: read the
        costly cumulative counters (energy, NVLink links) now (a full sample only)."""
        now = self.clock() if now is None else now
        for r in self.readers:
            row = r.read(now, fast=fast, counters=counters)
            self._rows.append((now, r.index, SOURCE_NVML, *(row.get(c, np.nan)
                                                            for c in self.columns)))
        if self.dcgm is not None and not fast:
            for gpu, row in self.dcgm.poll(now):
                self._rows.append((now, gpu, SOURCE_DCGM, *(row.get(c, np.nan)
                                                            for c in self.columns)))

    def tick(self) -> float:
        """One step of the sampling loop: a full sample when one is due or the profiler
        just started or stopped recording (with the costly counters, energy and NVLink
        bytes, so the recording's energy and link traffic are differences), else a fast one
        while it records (nothing when idle); then a chunk if due. Returns the seconds to
        wait before the next tick."""
        now = self.clock()
        active = self.active_period is not None and self.is_active()
        edge, self._was_active = active != self._was_active, active
        period_ns = int(self.period * 1e9)
        # half a tick of slack: the tick that lands just short of the period is the due one
        slack_ns = int((self.active_period if active else WATCH_S) * 5e8)
        if edge or self._last_full_ns is None or now - self._last_full_ns >= period_ns - slack_ns:
            self._last_full_ns = now
            self.sample_once(now=now, counters=edge)
        elif active:
            self.sample_once(fast=True, now=now)
        self.maybe_flush()
        return self.active_period if active else min(WATCH_S, self.period)

    def maybe_flush(self) -> Path | None:
        """Write a chunk when ``chunk_s`` of samples have accumulated."""
        if self.clock() - self._last_flush_ns >= self.chunk_ns:
            return self.flush()
        return None

    def flush(self) -> Path | None:
        """Write the buffered rows as the next chunk (atomically); None if empty, or when
        the write fails (the sampling then stops, see the class doc)."""
        self._last_flush_ns = self.clock()
        rows, self._rows = self._rows, []
        if not rows or self.write_failure is not None:
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
        try:
            write_bytes_atomic(path, buf.getvalue())
        except OSError as exc:  # a full disk must not cost the job: stop sampling instead
            self.write_failure = exc
            self._stop.set()
            self.on_write_failure(path, exc, len(rows))
            return None
        self.chunks_written.append(path)
        return path

    def _warn_write_failure(self, path: Path, exc: BaseException, samples: int) -> None:
        log.warning("profkit: cannot write NVML samples into %s (%s): sampling stops, "
                    "%d samples lost", path.parent, exc, samples)

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                wait_s = self.tick()
            except Exception:  # noqa: BLE001 - the sampler must never kill the job
                wait_s = self.period
                self.errors += 1
                if self.errors == 1:
                    log.warning("profkit: NVML sampling error", exc_info=True)
            next_t += wait_s
            delay = next_t - time.monotonic()
            if delay < 0:
                next_t, delay = time.monotonic(), 0.0
            self._sleep(delay)

    def _final_sample(self) -> None:
        try:
            self.sample_once(counters=True)
        except Exception:  # noqa: BLE001 - the sampler must never fail the job at exit
            self.errors += 1
            log.debug("final NVML sample failed", exc_info=True)

    def stop(self) -> list[Path]:
        """Stop the thread, write the last chunk, release GPM buffers; the chunk paths."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        try:
            if (self.readers and self.write_failure is None
                    and not (self._thread and self._thread.is_alive())):
                # a last full sample with the cumulative counters: energy and link bytes
                # over the sampler's life are differences even when nothing was recorded
                self._final_sample()
            self.flush()
        finally:
            for r in self.readers:
                r.close()
        return self.chunks_written

