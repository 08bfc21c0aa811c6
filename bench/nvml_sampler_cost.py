"""CPU cost of the profkit NVML sampler thread, idle and while the profiler records.

    python bench/nvml_sampler_cost.py                 # real NVML if available, else a fake
    python bench/nvml_sampler_cost.py --fake --seconds 2
    python bench/nvml_sampler_cost.py --active-hz 100,200,500,1000 --gpm-interval-ms 20

Prints one table row per mode: idle (every metric at --hz) and active (--hz plus the fast
metrics at each --active-hz), with the metrics each kind of row reads, the CPU time of the
process as a % of one core (the main thread sleeps, so nearly all of it is the sampler's),
the samples per second achieved, how many GPM and NVLink readings were finite, and how
often the SM clock and instantaneous power actually changed between readings (a value the
driver refreshes slowly repeats). The mode is fixed per row, so the recording start/stop
rows with the costly counters (energy, NVLink links) appear once at most: their cost is
in the per-read table that follows.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from types import SimpleNamespace

import numpy as np
from profkit.collectors.nvml import gpu_reader
from profkit.collectors.nvml import sampler as nvml_mod
from profkit.collectors.nvml.gpu_reader import FAST_COLUMNS, GPM_COLUMNS, GpuReader
from profkit.collectors.nvml.sampler import NvmlSampler, load_nvml


class _Fake:
    """Fixed readings, a GPU without GPM, with instantaneous power and 2 NVLink links."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU, NVML_SUCCESS = 1, 2, 0, 0
    NVML_FI_DEV_POWER_INSTANT, NVML_FI_DEV_NVLINK_LINK_COUNT = 186, 91
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139

    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetIndex(self, h): return h
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=50, memory=20)
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(used=1 << 30)
    def nvmlDeviceGetClockInfo(self, h, k): return 1980
    def nvmlDeviceGetPowerUsage(self, h): return 300_000
    def nvmlDeviceGetTotalEnergyConsumption(self, h): return 1
    def nvmlDeviceGetTemperature(self, h, s): return 50
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0
    def nvmlGpmQueryDeviceSupport(self, h): return SimpleNamespace(isSupportedDevice=0)

    def nvmlDeviceGetFieldValues(self, h, requests):
        t_us = time.time_ns() // 1000
        return [SimpleNamespace(nvmlReturn=0, valueType=3, timestamp=t_us,
                                value=SimpleNamespace(ullVal=2 if fid == 91 else t_us))
                for fid, _ in requests]


def measure(nvml, gpu: int, hz: float, active_hz: float, active: bool, seconds: float) -> dict:
    """Run the sampler thread for ``seconds``; its steady cost (opening the GPU and writing
    the chunk at stop left out: once per capture) and what it recorded."""
    with tempfile.TemporaryDirectory() as d:
        s = NvmlSampler(d, 0, [gpu], hz=hz, nvml=nvml, active_hz=active_hz,
                        is_active=lambda: active, chunk_s=3600)
        if not s.start():
            raise SystemExit(f"GPU {gpu} cannot be sampled")
        time.sleep(0.5)  # past the first (GPM-priming) samples
        c0, w0, n0 = time.process_time(), time.perf_counter(), len(s._rows)
        time.sleep(seconds)
        cpu, wall, n1 = time.process_time() - c0, time.perf_counter() - w0, len(s._rows)
        paths = s.stop()
        parts = [dict(np.load(p)) for p in paths]
    data = {k: np.concatenate([p[k] for p in parts])[n0:n1] for k in parts[0]} if parts else {}
    full = np.isfinite(data["gpu_util_pct"]) if data else np.array([], bool)
    return {"cpu_pct": 100 * cpu / wall, "wall": wall, "data": data, "full": full,
            "columns": s.columns}


def usable(data: dict, columns: list[str]) -> str:
    """'finite/total' over the readings of ``columns`` (rows where any was attempted)."""
    cols = [c for c in columns if c in data]
    if not cols:
        return "-"
    values = np.stack([data[c] for c in cols])
    return f"{int(np.isfinite(values).sum())}/{values.size}"


def changes(data: dict, column: str) -> str:
    """How often a column's reading differs from the previous one: a counter the driver
    refreshes more slowly than it is read repeats its value."""
    v = data.get(column)
    if v is None or not np.isfinite(v).any():
        return "-"
    v = v[np.isfinite(v)]
    return f"{int((np.diff(v) != 0).sum())}/{max(len(v) - 1, 0)}"


def gpm_mean(data: dict) -> str:
    v = data.get("gpm_sm_active_pct")
    return f"{np.nanmean(v):.1f}" if v is not None and np.isfinite(v).any() else "-"


def table_row(mode: str, rate: str, reads: str, m: dict) -> str:
    n_full, n_fast = int(m["full"].sum()), int((~m["full"]).sum())
    links = [c for c in m["columns"] if c.startswith("nvlink_l")]
    d = m["data"]
    return (f"| {mode} | {rate} | {reads} | {m['cpu_pct']:.2f} | {n_full / m['wall']:.1f} | "
            f"{n_fast / m['wall']:.1f} | {usable(d, list(GPM_COLUMNS))} | {gpm_mean(d)} | "
            f"{usable(d, links)} | {changes(d, 'sm_clock_mhz')} | "
            f"{changes(d, 'power_instant_w')} |")


def call_costs(nvml, gpu: int, repeats: int = 200) -> list[str]:
    """Median and minimum microseconds of each NVML read on its own, then of whole
    readings as the sampler takes them (10 Hz full, 200 Hz fast: GPM and energy when due)."""
    reader = GpuReader(nvml, gpu)
    h = reader.handle
    calls = {name: (lambda fn=fn: fn(h)) for name, fn in reader._readers.items()}
    calls["utilization (gpu_util_pct, mem_util_pct)"] = lambda: nvml.nvmlDeviceGetUtilizationRates(h)
    calls["energy_mj"] = lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h)
    if reader.fields.request:
        n = len(reader.fields.request)
        calls["field values: power (every row)"] = \
            lambda: nvml.nvmlDeviceGetFieldValues(h, reader.fields.request[:1])
        calls[f"field values: power + {n - 1} NVLink counters (recording start/stop rows)"] = \
            lambda: nvml.nvmlDeviceGetFieldValues(h, reader.fields.request)
    clock = {"ns": time.time_ns()}

    def reading(step_ns: int, fast: bool):
        def fn():
            clock["ns"] += step_ns
            reader.read(clock["ns"], fast=fast)
        return fn

    if reader.gpm.supported:
        calls["GPM sample"] = lambda: nvml.nvmlGpmSampleGet(h, reader.gpm._cur)
        calls["GPM sample + metrics get"] = lambda: (
            clock.__setitem__("ns", clock["ns"] + 100_000_000), reader.gpm.read(clock["ns"]))
    calls["full reading, every 100 ms"] = reading(100_000_000, False)
    calls["full reading with the costly counters (start/stop rows)"] = \
        lambda: reader.read(clock["ns"], counters=True)
    calls["fast reading, every 5 ms"] = reading(5_000_000, True)
    lines = ["| NVML read | median us | min us |", "|---|---|---|"]
    for name, fn in calls.items():
        times = []
        for _ in range(repeats):
            t = time.perf_counter_ns()
            try:
                fn()
            except Exception:  # noqa: BLE001 - a read this GPU lacks
                break
            times.append((time.perf_counter_ns() - t) / 1e3)
        cost = f"{statistics.median(times):.1f} | {min(times):.1f}" if times else "fails | -"
        lines.append(f"| {name} | {cost} |")
    reader.close()
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hz", type=float, default=10.0, help="full-sample rate")
    ap.add_argument("--active-hz", default="200,500,1000",
                    help="comma-separated fast rates to measure while 'recording'")
    ap.add_argument("--seconds", type=float, default=5.0, help="per mode")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--fake", action="store_true")
    ap.add_argument("--gpm-interval-ms", type=float,
                    help="try GPM reads this often (NVML documents > 100 ms)")
    ap.add_argument("--watch-ms", type=float,
                    help="idle wake-up interval (default nvml.WATCH_S; 100 = none between "
                    "the 10 Hz samples)")
    args = ap.parse_args()
    if args.gpm_interval_ms is not None:
        gpu_reader.GPM_MIN_INTERVAL_NS = int(args.gpm_interval_ms * 1e6)
    if args.watch_ms is not None:
        nvml_mod.WATCH_S = args.watch_ms / 1e3
    nvml = None if args.fake else load_nvml()
    kind = "real NVML" if nvml is not None else "fake NVML"
    nvml = nvml or _Fake()
    print(f"{kind}, GPU {args.gpu}, {args.seconds:g} s per mode, GPM every >= "
          f"{gpu_reader.GPM_MIN_INTERVAL_NS / 1e6:g} ms, idle wake-ups every "
          f"{nvml_mod.WATCH_S * 1e3:g} ms")
    print("| mode | rate | metrics read | CPU % of a core | full samples/s | fast samples/s "
          "| GPM values finite | mean GPM SM active % | NVLink rates finite "
          "| SM clock changes | instant power changes |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    idle = measure(nvml, args.gpu, args.hz, 0, False, args.seconds)
    print(table_row("idle", f"{args.hz:g} Hz", f"all {len(idle['columns'])}", idle))
    fast_reads = ", ".join((*FAST_COLUMNS, "fields", "GPM when due"))
    for rate in (float(r) for r in args.active_hz.split(",") if r):
        m = measure(nvml, args.gpu, args.hz, rate, True, args.seconds)
        print(table_row("active", f"{args.hz:g} Hz + {rate:g} Hz", fast_reads, m))
    print()
    print("\n".join(call_costs(nvml, args.gpu)))


if __name__ == "__main__":
    main()
