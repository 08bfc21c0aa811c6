"""Shared fixtures of the collectors tests: a fake NVML module, a fake clock and a runner
of real 2-process torchrun jobs."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from profkit.collectors.nvml import sampler as nvml_mod


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """The subset of pynvml the sampler calls, with fixed readings.

    ``fail``: function names that raise; ``gpm``: report GPM support; metric 60 (NVLink RX)
    reports NOT_SUPPORTED inside a successful nvmlGpmMetricsGet. ``fields``: answer
    nvmlDeviceGetFieldValues (see :class:`FakeFields`)."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU, NVML_SUCCESS = 1, 2, 0, 0
    NVML_FI_DEV_NVLINK_LINK_COUNT, NVML_FI_DEV_POWER_INSTANT = 91, 186
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
    NVML_NVLINK_MAX_LINKS = 18
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY = 2, 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL, NVML_GPM_METRIC_DRAM_BW_UTIL = 5, 10
    NVML_GPM_METRIC_PCIE_TX_PER_SEC, NVML_GPM_METRIC_PCIE_RX_PER_SEC = 20, 21
    NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 60, 61

    def __init__(self, *, gpm: bool = False, fail: tuple[str, ...] = (),
                 fields: FakeFields | None = None):
        self.gpm, self.energy_mj, self.calls = gpm, 1_000_000, []
        if fields is not None:
            self.nvmlDeviceGetFieldValues = fields
        for name in fail:
            setattr(self, name, self._raiser(name))

    @staticmethod
    def _raiser(name):
        def fn(*a, **k):
            raise FakeNvmlError(f"{name} failed")
        return fn

    def nvmlInit(self): self.calls.append("init")
    def nvmlShutdown(self): pass
    def nvmlSystemGetDriverVersion(self): return "580.159.04"
    def nvmlDeviceGetHandleByIndex(self, i): return ("handle", i)
    def nvmlDeviceGetHandleByUUID(self, uuid): return ("handle", 3)
    def nvmlDeviceGetIndex(self, h): return h[1]
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=75, memory=30)
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(used=2**30, total=2**34)
    def nvmlDeviceGetClockInfo(self, h, kind): return 1980 if kind == 1 else 2619
    def nvmlDeviceGetPowerUsage(self, h): return 350_500  # mW
    def nvmlDeviceGetTemperature(self, h, sensor): return 55
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 4

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.energy_mj += 35_000
        return self.energy_mj

    # GPM
    class c_nvmlGpmMetricsGet_t:  # noqa: N801 - pynvml's name
        def __init__(self):
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
                            for _ in range(16)]

    def nvmlGpmQueryDeviceSupport(self, h): return SimpleNamespace(isSupportedDevice=int(self.gpm))
    def nvmlGpmSampleAlloc(self): return object()
    def nvmlGpmSampleGet(self, h, s): self.calls.append("gpm_sample")
    def nvmlGpmSampleFree(self, s): self.calls.append("gpm_free")

    def nvmlGpmMetricsGet(self, mg):
        assert mg.sample1 is not mg.sample2
        for m in mg.metrics[: mg.numMetrics]:
            m.value = m.metricId * 1.5
            m.nvmlReturn = 3 if m.metricId == 60 else 0
        return mg


class FakeFields:
    """nvmlDeviceGetFieldValues of a GPU with ``links`` NVLink links; link ``broken`` answers
    NOT_SUPPORTED. Each call is ``dt_us`` later than the last (``dt_us=0``: a cached value);
    link L's TX counter grows by 1024 * (L + 1) KiB a call and RX by half that;
    instantaneous power is 400 W (400000 mW)."""

    def __init__(self, links: int = 3, broken: int | None = 2, dt_us: int = 5_000):
        self.links, self.broken, self.dt_us = links, broken, dt_us
        self.t_us, self.calls, self.fail_next = 1_700_000_000_000_000, 0, set()

    def __call__(self, handle, requests):
        self.t_us += self.dt_us
        self.calls += 1
        return [self._entry(fid, scope) for fid, scope in requests]

    def _entry(self, fid, scope):
        ret, value = 0, 0
        if fid == 91:
            value = self.links
        elif fid == 186:
            value = 400_000
        elif fid in (138, 139) and scope < self.links and scope != self.broken:
            value = 1024 * (scope + 1) * self.calls // (1 if fid == 138 else 2)
        else:
            ret = 3  # NVML_ERROR_NOT_SUPPORTED
        if (fid, scope) in self.fail_next:
            ret = 999
        return SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=self.t_us, latencyUsec=0,
                               valueType=3, nvmlReturn=ret, value=SimpleNamespace(ullVal=value))


class FakeClock:
    """Epoch-ns clock that advances by ``step_ns`` on every read."""

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000, step_ns: int = 100_000_000):
        self.now, self.step_ns = start_ns, step_ns

    def __call__(self) -> int:
        self.now += self.step_ns
        return self.now


@pytest.fixture
def fake_nvml():
    return FakeNvml


@pytest.fixture
def fake_clock():
    return FakeClock


@pytest.fixture
def fake_fields():
    return FakeFields


@pytest.fixture(autouse=True)
def _reset_nvml_warning():
    nvml_mod._warned = False
    yield
    nvml_mod._warned = False


def read_trace(path: Path) -> dict:
    """A gzip Kineto trace as JSON (fails loudly if not valid gzip JSON)."""
    with gzip.open(path, "rt") as f:
        return json.load(f)


def event_names(trace: dict) -> set[str]:
    return {e.get("name", "") for e in trace.get("traceEvents", [])}


@pytest.fixture
def trace_reader():
    return SimpleNamespace(read=read_trace, names=event_names)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(script: Path, *args: str, env: dict[str, str] | None = None,
                 timeout_s: float = 120) -> SimpleNamespace:
    """Run ``script`` on 2 local ranks under torchrun. Returns ``returncode`` (None when the
    job outlived ``timeout_s``: then it and every worker are killed, never left behind),
    ``stdout`` and ``stderr``."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
           *map(str, args)]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return SimpleNamespace(returncode=proc.returncode, stdout=out, stderr=err)
    except subprocess.TimeoutExpired:
        # torchrun starts each worker in a session of its own: kill them by pid, found
        # before torchrun dies (they would hold the output pipes open for ever)
        for pid in [*descendants(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        return SimpleNamespace(returncode=None, stdout=out, stderr=err)


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux /proc; any of its threads may have started one)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(c) for c in (task / "children").read_text().split()]
    return children + [d for c in children for d in descendants(c)]


@pytest.fixture(scope="session")
def torchrun():
    return run_torchrun
