"""Read one NVML sample of one GPU: device metrics, field values (instantaneous power,
per-link NVLink throughput) and GPM on Hopper and newer.

``nvml`` is the ``pynvml`` module (package ``nvidia-ml-py``) or any object with the same
functions and constants, so tests can pass a fake. Every call is checked on its own: a
failing reading becomes NaN and the others go on.

A *full* reading takes every column but the costly counters; a *fast* one (taken many
times per step while the torch profiler records) only what is cheap and can change within
a step: the SM clock, the clock-event reasons, the instantaneous power, and GPM when its
interval allows. The costly cumulative counters (energy, per-link NVLink bytes) are read
when asked (``counters=True``) and energy also every ENERGY_MIN_INTERVAL_NS.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

from profkit.collectors.nvml.field_reader import FieldReader

log = logging.getLogger(__name__)
NAN = math.nan

BASE_COLUMNS = ("gpu_util_pct", "mem_util_pct", "mem_used_bytes", "sm_clock_mhz",
                "mem_clock_mhz", "power_w", "energy_mj", "temp_c", "clocks_event_reasons")
# Column -> (pynvml constant name, metric id used if the module lacks the constant).
GPM_METRICS = {
    "gpm_sm_active_pct": ("NVML_GPM_METRIC_SM_UTIL", 2),
    "gpm_sm_occupancy_pct": ("NVML_GPM_METRIC_SM_OCCUPANCY", 3),
    "gpm_tensor_active_pct": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 5),
    "gpm_dram_bw_pct": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 10),
    "pcie_tx_mibps": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", 20),
    "pcie_rx_mibps": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", 21),
    "nvlink_rx_mibps": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", 60),
    "nvlink_tx_mibps": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", 61),
}
GPM_COLUMNS = tuple(GPM_METRICS)
# The energy counter costs ~3 ms of CPU per read (H100, driver 580) against ~1-10 us for
# the others: at 1 Hz it alone was a third of the sampler's idle cost. It is cumulative, so
# reading it every 5 s, and at the start and end of each profiler recording (the sampler
# asks for those), loses nothing a step-level analysis can use.
ENERGY_MIN_INTERVAL_NS = 5_000_000_000
# NVML's GPM docs: the two samples of a metrics read should be more than 100 ms apart ("due
# to the internal sample refresh rate"); closer samples give zeros or stale values. A little
# slack for 10 Hz jitter. GPM therefore cannot resolve a ~30 ms step.
GPM_MIN_INTERVAL_NS = 90_000_000
# Read by fast readings: cheap calls (~1-2 us) whose value can change within a step.
# Utilisation (a 1/6 s to 1 s window, ~190 us a call), memory, temperature and energy
# are left to the full readings.
FAST_COLUMNS = ("sm_clock_mhz", "clocks_event_reasons")


def _readers(nvml: Any) -> dict[str, Callable[[Any], float]]:
    """Column -> function(handle) returning the value in the column's unit."""
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    temp = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    reasons = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
               or _missing)
    return {
        "mem_used_bytes": lambda h: nvml.nvmlDeviceGetMemoryInfo(h).used,
        "sm_clock_mhz": lambda h: nvml.nvmlDeviceGetClockInfo(h, sm),
        "mem_clock_mhz": lambda h: nvml.nvmlDeviceGetClockInfo(h, mem),
        "power_w": lambda h: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,  # mW -> W
        "temp_c": lambda h: nvml.nvmlDeviceGetTemperature(h, temp),
        "clocks_event_reasons": lambda h: reasons(h),
    }


def _missing(handle: Any) -> float:
    raise NotImplementedError("clock-event reasons not available in this pynvml")


class GpuReader:
    """Samples one GPU. ``gpu`` is an NVML index (int) or a UUID (str)."""

    def __init__(self, nvml: Any, gpu: int | str):
        self.nvml = nvml
        if isinstance(gpu, str):
            self.handle = nvml.nvmlDeviceGetHandleByUUID(gpu)
        else:
            self.handle = nvml.nvmlDeviceGetHandleByIndex(gpu)
        try:
            self.index = int(nvml.nvmlDeviceGetIndex(self.handle))
        except Exception:  # noqa: BLE001
            self.index = gpu if isinstance(gpu, int) else -1
        self._readers = _readers(nvml)
        self._fast_readers = {c: self._readers[c] for c in FAST_COLUMNS}
        self._energy_ns = -(2**62)
        self.fields = FieldReader(nvml, self.handle)
        self.gpm = _Gpm(nvml, self.handle)

    def read(self, now_ns: int, fast: bool = False, counters: bool = False
             ) -> dict[str, float]:
        """One row: every base column (NaN where the call failed; ``energy_mj`` NaN between
        its reads every ENERGY_MIN_INTERVAL_NS), the field columns (the NVLink links only
        with ``counters``, which reads the energy too), and the GPM columns (NaN until two
        GPM samples far enough apart exist). ``fast``: only the FAST_COLUMNS, the power
        field and GPM; the caller fills the rest with NaN."""
        row = {} if fast else self._util()
        if not fast:
            row["energy_mj"] = self._energy(now_ns, counters)
        for col, fn in (self._fast_readers if fast else self._readers).items():
            try:
                row[col] = float(fn(self.handle))
            except Exception:  # noqa: BLE001 - NVMLError, not supported, fake failures
                row[col] = NAN
        row.update(self.fields.read(now_ns, links=counters and not fast))
        if self.gpm.supported:
            row.update(self.gpm.read(now_ns))
        return row

    def _util(self) -> dict[str, float]:
        try:
            u = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)  # ~190 us: call once
            return {"gpu_util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}
        except Exception:  # noqa: BLE001
            return {"gpu_util_pct": NAN, "mem_util_pct": NAN}

    def _energy(self, now_ns: int, due: bool) -> float:
        if not due and now_ns - self._energy_ns < ENERGY_MIN_INTERVAL_NS:
            return NAN
        self._energy_ns = now_ns
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # noqa: BLE001
            return NAN

    def close(self) -> None:
        self.gpm.close()


class _Gpm:
    """GPM state of one device: two sample buffers swapped after each metrics read."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml, self.handle = nvml, handle
        self.supported = False
        self._prev = self._cur = None
        self._prev_ns = -1
        self._ids = {col: int(getattr(nvml, const, default))
                     for col, (const, default) in GPM_METRICS.items()}
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(handle)
            if getattr(support, "isSupportedDevice", 0):
                self._prev, self._cur = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
                self.supported = True
        except Exception:  # noqa: BLE001 - pre-Hopper, old driver, old pynvml
            log.debug("GPM not supported", exc_info=True)

    def read(self, now_ns: int) -> dict[str, float]:
        out = dict.fromkeys(GPM_COLUMNS, NAN)
        if self._prev_ns < 0:
            if self._sample(self._prev):
                self._prev_ns = now_ns
            return out
        if now_ns - self._prev_ns < GPM_MIN_INTERVAL_NS or not self._sample(self._cur):
            return out
        out.update(self._metrics())
        self._prev, self._cur, self._prev_ns = self._cur, self._prev, now_ns
        return out

    def _sample(self, buf: Any) -> bool:
        try:
            self.nvml.nvmlGpmSampleGet(self.handle, buf)
            return True
        except Exception:  # noqa: BLE001
            return False

    def _metrics(self) -> dict[str, float]:
        nvml = self.nvml
        mg = nvml.c_nvmlGpmMetricsGet_t()
        mg.version = nvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self._ids)
        mg.sample1, mg.sample2 = self._prev, self._cur
        cols = list(self._ids)
        for i, col in enumerate(cols):
            mg.metrics[i].metricId = self._ids[col]
        try:
            nvml.nvmlGpmMetricsGet(mg)
        except Exception:  # noqa: BLE001
            return {}
        ok = getattr(nvml, "NVML_SUCCESS", 0)
        return {col: (float(mg.metrics[i].value) if mg.metrics[i].nvmlReturn == ok else NAN)
                for i, col in enumerate(cols)}

    def close(self) -> None:
        for buf in (self._prev, self._cur):
            if buf is not None:
                try:
                    self.nvml.nvmlGpmSampleFree(buf)
                except Exception:  # noqa: BLE001
                    pass
        self._prev = self._cur = None
        self.supported = False
