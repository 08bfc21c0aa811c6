"""NVML joined to the profiled steps, on a real H100 capture with the 200 Hz active sampling
(samples/runs/diagnosis/nvml_active_h100: zoo/compute, 6 recorded steps of ~18 ms).
Expectations are computed here from the raw files (the trace JSON and the .npz chunk)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import profkit

RUN = Path(__file__).resolve().parents[2] / "samples/runs/diagnosis/nvml_active_h100"


@pytest.fixture(scope="module")
def raw():
    trace = json.loads(gzip.open(next((RUN / "traces").glob("*.json.gz"))).read())
    base_ns = int(trace["baseTimeNanoseconds"])
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    lo = min(int(round(e["ts"] * 1000)) for e in kernels) + base_ns
    hi = max(int(round((e["ts"] + e["dur"]) * 1000)) for e in kernels) + base_ns
    steps = len({e["name"] for e in trace["traceEvents"]  # CPU range and GPU annotation
                 if str(e.get("name", "")).startswith("ProfilerStep#")})
    npz = dict(np.load(RUN / "nvml" / "rank0.0.npz"))
    return {"lo": lo, "hi": hi, "steps": steps, "npz": npz}


@pytest.fixture(scope="module")
def nvml_row():
    return profkit.analyze(profkit.load_run(RUN)).tables["nvml"].iloc[0]


def test_each_step_gets_several_clock_samples(raw, nvml_row):
    ts, clock = raw["npz"]["ts_ns"], raw["npz"]["sm_clock_mhz"]
    inside = (ts >= raw["lo"]) & (ts <= raw["hi"]) & np.isfinite(clock)
    window_ms = (raw["hi"] - raw["lo"]) / 1e6
    # 200 Hz while recording: one sample per 5 ms of the kernels' span (10 Hz would give ~1)
    assert inside.sum() >= 0.8 * window_ms / 5, (inside.sum(), window_ms)
    assert inside.sum() / raw["steps"] >= 3
    # the analysis joins (about) the same samples: its used steps are a subset of the span
    assert 3 * 6 <= nvml_row["clock_samples"] <= inside.sum() + 2


def test_power_is_the_instantaneous_reading_while_gemms_run(raw, nvml_row):
    d, ts = raw["npz"], raw["npz"]["ts_ns"]
    inside = (ts >= raw["lo"]) & (ts <= raw["hi"])
    instant = d["power_instant_w"][inside & np.isfinite(d["power_instant_w"])]
    averaged = d["power_w"][inside & np.isfinite(d["power_w"])]
    # the 1 s average lags far behind the load in a 110 ms window; the instant one does not
    assert instant.mean() > 2 * averaged.mean()
    assert nvml_row["power_source"] == "power_instant_w"
    assert nvml_row["power_mean_w"] == pytest.approx(instant.mean(), rel=0.1)
