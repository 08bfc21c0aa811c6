"""On a real GPU (run on the device): NVML sampling while matmuls run."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    pytest.importorskip("pynvml")
    return torch


def _load(paths):
    parts = [dict(np.load(p)) for p in paths]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_sampler_sees_the_gpu_work(tmp_path, cuda):
    from profkit.collectors.job_facts.dist import rank_info
    from profkit.collectors.nvml.sampler import NvmlSampler, load_nvml

    torch = cuda
    nvml = load_nvml()
    assert nvml is not None, "NVML should load on a GPU machine"
    info = rank_info()
    s = NvmlSampler(tmp_path, 0, [info.gpu_uuid or 0], hz=10.0, nvml=nvml, chunk_s=1.0)
    assert s.start()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t_end = time.monotonic() + 2.0
    while time.monotonic() < t_end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    paths = s.stop()
    assert len(paths) >= 2  # chunk_s=1 over 2 s
    d = _load(paths)
    assert len(d["ts_ns"]) >= 15
    assert np.nanmax(d["sm_clock_mhz"]) > 0
    assert np.nanmax(d["power_w"]) > 0
    energy = d["energy_mj"][np.isfinite(d["energy_mj"])]
    assert energy[-1] > energy[0]
    assert np.nanmax(d["gpu_util_pct"]) > 0
    name = torch.cuda.get_device_name()
    cc = torch.cuda.get_device_capability()
    if cc[0] >= 9:  # Hopper and newer: GPM
        assert "gpm_tensor_active_pct" in d, f"no GPM columns on {name}"
        assert np.nanmax(d["gpm_tensor_active_pct"]) > 0
        assert np.nanmax(d["gpm_sm_active_pct"]) > 0


def test_profile_on_gpu_writes_gpu_metadata_and_samples(tmp_path, cuda):
    from profkit.collectors import profile

    torch = cuda
    a = torch.randn(2048, 2048, device="cuda")
    with profile(tmp_path, wait=0, warmup=1, active=2) as p:
        for _ in range(4):
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()
            time.sleep(0.1)
            p.step()
    doc = json.loads((tmp_path / "run.json").read_text())
    assert doc["status"] == "ok"
    assert doc["gpus"] and doc["gpus"][0]["sm_count"] > 0 and doc["gpus"][0]["memory_bytes"] > 0
    assert doc["gpus"][0]["uuid"].startswith("GPU-")
    assert doc["ranks"]["0"]["device"] >= 0 and doc["versions"]["driver"]
    assert list((tmp_path / "nvml").glob("rank0.*.npz"))
    assert (tmp_path / "traces" / "rank0.pt.trace.json.gz").exists()
