"""The NVML sampler's two rates (every metric at hz; the fast metrics at active_hz while the
torch profiler records), the field values (instantaneous power, per-link NVLink
throughput), and the chunk format, with the fake NVML and a clock the test moves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from profkit.collectors.nvml.field_reader import FieldReader
from profkit.collectors.nvml.gpu_reader import BASE_COLUMNS
from profkit.collectors.nvml.sampler import NvmlSampler, torch_profiler_recording

T0 = 1_700_000_000_000_000_000
LINKS = ["nvlink_l0_tx_mibps", "nvlink_l0_rx_mibps", "nvlink_l1_tx_mibps", "nvlink_l1_rx_mibps"]


class Clock:
    """Epoch ns that only the test moves."""

    def __init__(self):
        self.now = T0

    def __call__(self) -> int:
        return self.now


def drive(sampler, clock, until_ms):
    """Run the sampling loop's ticks, advancing the clock by each returned wait."""
    while clock.now < T0 + until_ms * 1_000_000:
        clock.now += round(sampler.tick() * 1e9)


def rows(sampler):
    return dict(np.load(sampler.flush()))


@pytest.fixture
def setup(tmp_path, fake_nvml, fake_fields, monkeypatch):
    monkeypatch.setenv("PROFKIT_NVML_NVLINK_LINKS", "1")  # per-link counters are opt-in
    state = {"active": False}
    clock = Clock()
    sampler = NvmlSampler(tmp_path, 0, [0], hz=10, active_hz=200, clock=clock,
                          nvml=fake_nvml(fields=fake_fields()),
                          is_active=lambda: state["active"])
    assert sampler.open()
    return sampler, clock, state


def test_rate_follows_the_profiler(setup):
    sampler, clock, state = setup
    drive(sampler, clock, 1000)            # idle: a full row every 100 ms
    state["active"] = True
    drive(sampler, clock, 1500)            # recording: a row every 5 ms, full every 100 ms
    state["active"] = False
    drive(sampler, clock, 2500)            # idle again
    d = rows(sampler)
    t_ms = (d["ts_ns"] - T0) / 1e6
    full = np.isfinite(d["gpu_util_pct"])  # utilisation is read by full rows only
    assert t_ms[full].tolist() == [float(t) for t in range(0, 2500, 100)]
    fast_t = t_ms[~full]
    assert len(fast_t) == 95 and fast_t.min() == 1005 and fast_t.max() == 1495
    assert np.all(np.diff(fast_t[fast_t < 1100]) == 5)
    assert np.isfinite(d["sm_clock_mhz"]).all()  # read by fast rows too
    assert np.isnan(d["temp_c"][~full]).all() and np.isnan(d["mem_used_bytes"][~full]).all()


def test_idle_sampler_wakes_often_enough_to_catch_the_profiler(setup):
    sampler, clock, state = setup
    drive(sampler, clock, 130)
    state["active"] = True  # the profiler starts 130 ms in, between two full rows
    drive(sampler, clock, 200)
    state["active"] = False
    drive(sampler, clock, 201)
    d = rows(sampler)
    t_ms = (d["ts_ns"] - T0) / 1e6
    # idle wake-ups every 25 ms: the one at 150 ms sees it and starts the 5 ms rate
    assert t_ms.tolist() == [0, 100, 150, 155, 160, 165, 170, 175, 180, 185, 190, 195, 200]
    # full rows at the recording's start and end read the energy counter (every 5 s else)
    assert t_ms[np.isfinite(d["energy_mj"])].tolist() == [0, 150, 200]
    assert t_ms[np.isfinite(d["gpu_util_pct"])].tolist() == [0, 100, 150, 200]


def test_no_fast_rate_when_off_or_not_faster(tmp_path, fake_nvml):
    for active_hz in (0, 10, 5):
        clock = Clock()
        s = NvmlSampler(tmp_path, 0, [0], hz=10, active_hz=active_hz, clock=clock,
                        nvml=fake_nvml(), is_active=lambda: True)
        s.open()
        drive(s, clock, 1000)
        assert len(rows(s)["ts_ns"]) == 10


def test_active_rate_from_the_environment(tmp_path, fake_nvml, monkeypatch):
    monkeypatch.setenv("PROFKIT_NVML_ACTIVE_HZ", "1000")
    assert NvmlSampler(tmp_path, 0, [0], nvml=fake_nvml()).active_period == 0.001
    monkeypatch.setenv("PROFKIT_NVML_ACTIVE_HZ", "0")
    assert NvmlSampler(tmp_path, 0, [0], nvml=fake_nvml()).active_period is None


def test_field_columns_and_units(setup):
    sampler, clock, state = setup
    assert sampler.columns == BASE_COLUMNS + ("power_instant_w", *LINKS)  # link 2: no answer
    state["active"] = True
    drive(sampler, clock, 20)  # the start row, then fast rows at 5, 10, 15 ms
    state["active"] = False
    drive(sampler, clock, 21)  # the stop row
    d = rows(sampler)
    assert set(d) == {"ts_ns", "gpu", "source", *sampler.columns}
    assert all(d[c].dtype == np.float64 for c in sampler.columns)
    assert d["power_instant_w"].tolist() == [400.0] * 5  # 400000 mW, in every row
    # the links' costly counters are read at the start and stop rows only: the stop row has
    # each link's mean rate over the recording, and link L sends 1024 * (L + 1) KiB per
    # 5 ms of the fake's clock, (L + 1) MiB / 5 ms
    for column, rate in zip(LINKS, (200.0, 100.0, 400.0, 200.0)):
        assert np.isnan(d[column][:4]).all() and d[column][4] == rate


def test_field_entries_are_checked_one_by_one(fake_nvml, fake_fields):
    fields = fake_fields(links=2, broken=None)
    reader = FieldReader(fake_nvml(fields=fields), ("handle", 0), links=True)
    reader.read(T0, links=True)
    fields.fail_next = {(186, 0), (138, 1)}
    out = reader.read(T0, links=True)
    assert math.isnan(out["power_instant_w"]) and math.isnan(out["nvlink_l1_tx_mibps"])
    assert out["nvlink_l0_tx_mibps"] == 200.0 and out["nvlink_l1_rx_mibps"] == 200.0


def test_links_are_read_only_when_asked(fake_nvml, fake_fields):
    fields = fake_fields(links=2, broken=None)
    reader = FieldReader(fake_nvml(fields=fields), ("handle", 0), links=True)
    calls = []
    fields_call = fields.__call__
    reader.nvml.nvmlDeviceGetFieldValues = lambda h, req: calls.append(len(req)) or fields_call(h, req)
    out = reader.read(T0)
    assert calls == [1] and out["power_instant_w"] == 400.0
    assert all(math.isnan(out[c]) for c in LINKS)
    reader.read(T0, links=True)
    assert calls == [1, 5]


def test_cached_counter_gives_no_rate(fake_nvml, fake_fields):
    fields = fake_fields(links=1, broken=None, dt_us=0)  # same timestamp every call
    reader = FieldReader(fake_nvml(fields=fields), ("handle", 0), links=True)
    for _ in range(3):
        out = reader.read(T0, links=True)
    assert math.isnan(out["nvlink_l0_tx_mibps"]) and out["power_instant_w"] == 400.0


def test_links_are_off_unless_asked_for(fake_nvml, fake_fields, monkeypatch):
    monkeypatch.delenv("PROFKIT_NVML_NVLINK_LINKS", raising=False)
    assert FieldReader(fake_nvml(fields=fake_fields()), ("handle", 0)).columns == [
        "power_instant_w"]


def test_no_field_columns_without_the_call(fake_nvml):
    assert FieldReader(fake_nvml(), ("handle", 0)).columns == []


def test_default_probe_is_the_torch_profilers_recording_flag():
    seen = []
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                                activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            seen.append(torch_profiler_recording())
            torch.ones(4).sum()
            prof.step()
    assert seen == [False, False, True, True, False]  # wait, warmup, 2 active, done
    assert torch_profiler_recording() is False
