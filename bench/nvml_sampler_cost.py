"""CPU cost of the profkit NVML sampler thread (prints CPU % of one core).

    python bench/nvml_sampler_cost.py            # real NVML if available, else a fake
    python bench/nvml_sampler_cost.py --fake --hz 10 --seconds 10

Measures process CPU time (time.process_time) over a sampling window with the main thread
asleep, so nearly all of it is the sampler's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from types import SimpleNamespace

from profkit.collectors.nvml import NvmlSampler, load_nvml


class _Fake:
    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--fake", action="store_true")
    args = ap.parse_args()
    nvml = None if args.fake else load_nvml()
    kind = "real NVML" if nvml is not None else "fake NVML"
    nvml = nvml or _Fake()
    with tempfile.TemporaryDirectory() as d:
        s = NvmlSampler(d, 0, [args.gpu], hz=args.hz, nvml=nvml)
        c0, w0 = time.process_time(), time.perf_counter()
        s.start()
        time.sleep(args.seconds)
        paths = s.stop()
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    n = sum(1 for _ in paths)
    print(f"{kind}: {args.hz:g} Hz for {wall:.1f} s -> {100 * cpu / wall:.2f}% of one core "
          f"({1e3 * cpu / max(1, args.hz * wall):.3f} ms CPU per sample), {n} chunk(s)")


if __name__ == "__main__":
    main()
