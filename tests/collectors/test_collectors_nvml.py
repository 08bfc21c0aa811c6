"""NVML sampler with a fake NVML object and a fake clock."""

from __future__ import annotations

import errno
import logging
import math
import os
import sys
import time

import numpy as np
import pytest
from profkit.collectors import run_dir_writes
from profkit.collectors.nvml.gpu_reader import BASE_COLUMNS, GPM_COLUMNS
from profkit.collectors.nvml.sampler import NvmlSampler, init_nvml, load_nvml


def _load_all(paths):
    parts = [dict(np.load(p)) for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def make(tmp_path, nvml, clock, **kw):
    s = NvmlSampler(tmp_path, 2, kw.pop("gpus", [0]), nvml=nvml, clock=clock, **kw)
    assert s.open()
    return s


def test_columns_units_and_chunk_file(tmp_path, fake_nvml, fake_clock):
    clock = fake_clock()
    s = make(tmp_path, fake_nvml(), clock)
    for _ in range(3):
        s.sample_once()
    path = s.flush()
    assert path == tmp_path / "nvml" / "rank2.0.npz"
    d = dict(np.load(path))
    assert set(d) == {"ts_ns", "gpu", "source", *BASE_COLUMNS}
    assert d["ts_ns"].dtype == np.int64 and d["gpu"].tolist() == [0, 0, 0]
    assert np.all(np.diff(d["ts_ns"]) == clock.step_ns)
    assert d["power_w"].tolist() == [350.5] * 3  # mW -> W
    assert d["mem_used_bytes"][0] == 2**30 and d["sm_clock_mhz"][0] == 1980
    assert d["mem_clock_mhz"][0] == 2619 and d["temp_c"][0] == 55
    assert d["gpu_util_pct"][0] == 75 and d["mem_util_pct"][0] == 30
    assert d["clocks_event_reasons"][0] == 4
    assert d["energy_mj"][0] == 1_035_000
    assert np.isnan(d["energy_mj"][1:]).all()  # the costly energy counter: every 5 s
    assert all(d[c].dtype == np.float64 for c in BASE_COLUMNS)
    assert not [p for p in (tmp_path / "nvml").iterdir() if p.name.startswith(".tmp-")]


def test_energy_read_every_5_s(tmp_path, fake_nvml, fake_clock):
    s = make(tmp_path, fake_nvml(), fake_clock(step_ns=100_000_000))
    for _ in range(60):
        s.sample_once()
    e = np.load(s.flush())["energy_mj"]
    assert np.flatnonzero(np.isfinite(e)).tolist() == [0, 50]
    assert np.all(np.diff(e[np.isfinite(e)]) == 35_000)


def test_failing_call_gives_nan_and_others_survive(tmp_path, fake_nvml, fake_clock):
    s = make(tmp_path, fake_nvml(fail=("nvmlDeviceGetPowerUsage",)), fake_clock())
    s.sample_once()
    d = dict(np.load(s.flush()))
    assert math.isnan(d["power_w"][0])
    assert d["sm_clock_mhz"][0] == 1980


def test_gpu_by_uuid_uses_nvml_index(tmp_path, fake_nvml, fake_clock):
    s = make(tmp_path, fake_nvml(), fake_clock(), gpus=["GPU-1234"])
    s.sample_once()
    assert np.load(s.flush())["gpu"].tolist() == [3]


def test_gpm_columns_on_supported_device(tmp_path, fake_nvml, fake_clock):
    nv = fake_nvml(gpm=True)
    s = make(tmp_path, nv, fake_clock(step_ns=100_000_000))
    for _ in range(3):
        s.sample_once()
    d = dict(np.load(s.flush()))
    assert set(GPM_COLUMNS) <= set(d)
    assert np.isnan(d["gpm_tensor_active_pct"][0])  # first sample: no interval yet
    assert d["gpm_tensor_active_pct"][1:].tolist() == [7.5, 7.5]  # metric id 5 * 1.5
    assert d["gpm_sm_active_pct"][1] == 3.0 and d["pcie_rx_mibps"][1] == 31.5
    assert np.isnan(d["nvlink_rx_mibps"][1])  # per-metric NOT_SUPPORTED -> NaN
    assert d["nvlink_tx_mibps"][1] == 91.5
    s.stop()
    assert nv.calls.count("gpm_free") == 2


def test_gpm_waits_for_minimum_interval(tmp_path, fake_nvml, fake_clock):
    s = make(tmp_path, fake_nvml(gpm=True), fake_clock(step_ns=20_000_000))
    for _ in range(4):
        s.sample_once()
    d = dict(np.load(s.flush()))
    assert np.isnan(d["gpm_sm_active_pct"]).all()


def test_no_gpm_columns_without_support(tmp_path, fake_nvml, fake_clock):
    s = make(tmp_path, fake_nvml(gpm=False), fake_clock())
    s.sample_once()
    assert not set(GPM_COLUMNS) & set(np.load(s.flush()).files)


def test_chunks_every_chunk_s(tmp_path, fake_nvml, fake_clock):
    clock = fake_clock(step_ns=250_000_000)
    s = make(tmp_path, fake_nvml(), clock, chunk_s=1.0)
    written = []
    for _ in range(10):
        s.sample_once()
        if (p := s.maybe_flush()) is not None:
            written.append(p)
    written += s.stop()[len(written):]
    assert [p.name for p in written] == [f"rank2.{i}.npz" for i in range(len(written))]
    assert len(written) >= 3
    assert len(_load_all(written)["ts_ns"]) == 10 + 1  # stop adds one full sample


def test_stop_reads_the_energy_again(tmp_path, fake_nvml, fake_clock):
    """Energy is read where sampling starts and at stop, so a short sampler life that never
    reached the 5 s energy interval still yields an energy difference (seen on an H100: a 2 s
    sampler had one energy reading)."""
    s = make(tmp_path, fake_nvml(), fake_clock(step_ns=100_000_000))
    for _ in range(5):
        s.sample_once()
    energy = _load_all(s.stop())["energy_mj"]
    finite = energy[np.isfinite(energy)]
    assert len(finite) == 2 and finite[-1] - finite[0] == 35_000


def test_failed_write_leaves_no_partial_file_and_stops_sampling(tmp_path, fake_nvml,
                                                                fake_clock, monkeypatch, caplog):
    s = make(tmp_path, fake_nvml(), fake_clock())
    s.sample_once()

    def boom(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run_dir_writes.os, "replace", boom)
    with caplog.at_level(logging.WARNING, logger="profkit.collectors.nvml.sampler"):
        assert s.flush() is None  # never raised into the job
        s.sample_once()
        assert s.flush() is None
    assert list((tmp_path / "nvml").iterdir()) == []
    assert s.write_failure.errno == errno.ENOSPC and s.chunks_written == []
    (warning,) = [r.getMessage() for r in caplog.records]
    assert str(tmp_path / "nvml") in warning and "no space left on device" in warning
    assert "1 samples lost" in warning


def test_sampler_thread_stops_itself_on_a_full_disk(tmp_path, fake_nvml, monkeypatch):
    failures = []
    s = NvmlSampler(tmp_path, 0, [0], nvml=fake_nvml(), hz=200.0, chunk_s=0.01,
                    on_write_failure=lambda path, exc, samples: failures.append(
                        (path.name, exc.errno, samples)))
    monkeypatch.setattr(run_dir_writes.os, "replace", lambda src, dst: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    assert s.start()
    deadline = time.monotonic() + 5
    while s._thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not s._thread.is_alive()  # it stopped on its own, the job was not told to
    assert s.stop() == [] and len(failures) == 1
    assert failures[0][:2] == ("rank0.0.npz", errno.ENOSPC) and failures[0][2] > 0
    assert list((tmp_path / "nvml").glob("*")) == []  # nothing half-written either


def test_missing_nvml_warns_once(caplog, fake_nvml):
    bad = fake_nvml(fail=("nvmlInit",))
    with caplog.at_level(logging.WARNING, logger="profkit.collectors.nvml.sampler"):
        assert init_nvml(bad) is None
        assert init_nvml(bad) is None
    assert len(caplog.records) == 1
    assert "NVML unavailable" in caplog.records[0].getMessage()


def test_pynvml_not_installed_warns_once(caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with caplog.at_level(logging.WARNING, logger="profkit.collectors.nvml.sampler"):
        assert load_nvml() is None
        assert load_nvml() is None
    assert len(caplog.records) == 1


def test_nothing_to_sample_without_gpus(tmp_path, fake_nvml):
    s = NvmlSampler(tmp_path, 0, [], nvml=fake_nvml())
    assert s.start() is False


def test_background_thread_samples_and_stops(tmp_path, fake_nvml):
    s = NvmlSampler(tmp_path, 0, [0], hz=200.0, nvml=fake_nvml())
    assert s.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    paths = s.stop()
    assert time.monotonic() - t0 < 1.0  # stop interrupts the sleep
    d = _load_all(paths)
    assert 10 < len(d["ts_ns"]) < 200
    assert abs(int(d["ts_ns"][-1]) - time.time_ns()) < 5e9  # epoch ns, not monotonic
    assert not s._thread.is_alive()
    assert s.errors == 0
    assert os.path.basename(paths[0]) == "rank0.0.npz"


def test_pcie_link_from_nvml_is_the_links_maximum():
    """run.json's gpus carry the host link (the analysis' peak for host<->device copies):
    NVML's maximum generation and width, not the current ones (an idle link trains down)."""
    from profkit.collectors.job_facts.run_document import pcie_link

    class Nvml:
        def nvmlDeviceGetHandleByUUID(self, uuid):
            assert uuid == "GPU-abc"
            return 7

        def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
            return 5

        def nvmlDeviceGetMaxPcieLinkWidth(self, h):
            return 16

        def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
            return 1  # idle: must not be used

    assert pcie_link(Nvml(), "GPU-abc") == {"pcie_gen": 5, "pcie_width": 16}

    class Broken(Nvml):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            raise RuntimeError("NVML_ERROR_NOT_FOUND")

    assert pcie_link(Broken(), "GPU-abc") == {}


def test_transfers_use_the_recorded_pcie_link():
    """A run.json that records a Gen4 x8 link gives HtoD copies a 15.8 GB/s peak
    (8 lanes x 1.969 GB/s), not the device model's Gen5 x16."""
    from profkit.analyzers.measure.transfers import link_peak

    meta = {"devices": [{"id": 0, "name": "NVIDIA H200", "numSms": 132}]}
    run_meta = {"gpus": [{"index": 0, "name": "NVIDIA H200", "pcie_gen": 4, "pcie_width": 8}]}
    peak, link = link_peak("HtoD", meta, run_meta)
    assert peak == pytest.approx(8 * 1.969) and "Gen4 x8 (run.json)" in link
    peak, link = link_peak("HtoD", meta, {})
    assert peak == pytest.approx(16 * 3.938) and "device model" in link
