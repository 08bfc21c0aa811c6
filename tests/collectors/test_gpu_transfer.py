"""On a real GPU (run on the device): a transfer-bound capture records the GPU's PCIe link in
run.json, and the analysis judges the upload against that link, not a guess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20


@pytest.fixture(scope="module")
def transfer_run(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    pytest.importorskip("pynvml")
    out = tmp_path_factory.mktemp("transfer") / "run"
    subprocess.run([sys.executable, str(ROOT / "samples/zoo/transfer.py"), "--out", str(out),
                    "--profiler", "profkit", "--steps", "8", "--mb", "256"],
                   check=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return out


def test_run_json_names_the_pcie_link(transfer_run):
    import pynvml

    gpus = json.loads((transfer_run / "run.json").read_text())["gpus"]
    assert gpus, "run.json lists no GPU"
    pynvml.nvmlInit()
    try:  # independent read of the same link through pynvml directly
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        gen = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
        width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
    finally:
        pynvml.nvmlShutdown()
    assert (gpus[0]["pcie_gen"], gpus[0]["pcie_width"]) == (gen, width)
    assert gen >= 3 and width >= 8


def test_upload_judged_against_that_link(transfer_run):
    import profkit

    a = profkit.analyze(profkit.load_run(transfer_run))
    assert a.verdict["primary"] == "memcpy", a.verdict
    t = a.tables["transfers"]
    up = t[t["direction"] == "HtoD"].iloc[0]
    assert "(run.json)" in up["link"], up["link"]
    gpus = json.loads((transfer_run / "run.json").read_text())["gpus"]
    assert f"Gen{gpus[0]['pcie_gen']} x{gpus[0]['pcie_width']}" in up["link"]
    # 256 MiB per step over a Gen4/5 x16 link: a pinned upload reaches a real share of it.
    assert 0.3 < up["peak_frac"] <= 1.05, up.to_dict()
    print("HtoD", up.to_dict())
