"""The "why" sample workloads (samples/zoo/*, captured by samples/capture_why.sh) and their
ground-truth helpers (samples/groundtruth.py): unit tests of the helpers, and CPU smoke runs
of every script and its twin at tiny sizes (slow: a subprocess each)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
# script -> the flag that makes its twin (or its "after" for the diff pairs)
WHY = {"eltwise_chain": "--compile", "precision": "--bf16", "cpu_optimizer": "--gpu-optimizer",
       "preprocess": "--workers=2", "recompile": "--mark-dynamic", "graph_hooks": "--no-hooks",
       "attention": "--flash", "gpt_sizes": "--batch=4", "kv_cache": "--kv-cache",
       "conv_shapes": "--no-benchmark"}


@pytest.fixture(scope="module")
def groundtruth():
    sys.path.insert(0, str(SAMPLES))
    try:
        import groundtruth as gt
        yield gt
    finally:
        sys.path.remove(str(SAMPLES))


def test_count_flops_counts_matmuls_only(groundtruth) -> None:
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    assert groundtruth.count_flops(lambda: a @ b) == 2 * 8 * 16 * 4
    assert groundtruth.count_flops(lambda: torch.relu(a) + 1) == 0


def test_count_tensor_bytes_counts_inputs_and_outputs_of_each_op(groundtruth) -> None:
    x = torch.randn(1000)  # 4000 bytes
    assert groundtruth.count_tensor_bytes(lambda: x + 1) == 2 * 4000  # read x, write the sum
    assert groundtruth.count_tensor_bytes(lambda: (x + 1) * x) == 2 * 4000 + 3 * 4000


def test_split_times_leaves_out_the_export_step(groundtruth) -> None:
    # wait, warm-up, 3 profiled, the export step, 2 clean
    times = [9.0, 8.0, 5.0, 6.0, 7.0, 100.0, 3.0, 4.0]
    assert groundtruth.split_times(times, 3) == {
        "profiled_median_ms": 6.0, "unprofiled_median_ms": 3.5, "unprofiled_steps": 2}


def test_host_clock_medians_per_phase(groundtruth) -> None:
    clock = groundtruth.HostClock()
    for _ in range(4):
        clock.new_step()
        with clock("work"):
            pass
    medians = clock.medians(skip=1)
    assert set(medians) == {"host_work_ms", "host_total_ms"}
    assert 0 <= medians["host_work_ms"] < 50


def test_capture_why_parses_and_captures_every_why_script() -> None:
    script = SAMPLES / "capture_why.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"' in text
    assert "--clock-control none" in text  # ncu must leave the GPU clocks alone
    for name in WHY:
        assert re.search(rf"^(why|ncu_step) \S+ {name}\b", text, re.M), name
        assert (SAMPLES / "zoo" / f"{name}.py").exists()


def _run(script: str, out: Path, *extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(SAMPLES / "zoo" / f"{script}.py"), "--tiny", "--device", "cpu",
           "--profiler", "torch", "--out", str(out), *extra]
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True,
                          timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{output[-4000:]}"
    [line] = [ln for ln in output.splitlines() if ln.startswith("PROFKIT_SAMPLE ")]
    return json.loads(line.removeprefix("PROFKIT_SAMPLE "))


def _profiled_steps(out: Path) -> list[int]:
    [trace] = sorted(out.rglob("*.pt.trace.json.gz"))
    with gzip.open(trace, "rt") as f:
        evs = json.load(f)["traceEvents"]
    return sorted(int(m.group(1)) for e in evs if e.get("cat") == "user_annotation"
                  and (m := re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", ""))))


@pytest.mark.slow
@pytest.mark.parametrize("twin", [False, True], ids=["cause", "twin"])
@pytest.mark.parametrize("name", sorted(WHY))
def test_why_script_and_twin_run_on_cpu(tmp_path: Path, name: str, twin: bool) -> None:
    out = tmp_path / name
    data = _run(name, out, *([WHY[name]] if twin else []))
    assert _profiled_steps(out) == [2, 3, 4]
    assert data["unprofiled_median_ms"] is not None and data["profiled_median_ms"] > 0
    flops = data.get("flop_per_step", data.get("flop_per_step_first"))
    assert flops == 0 if name == "eltwise_chain" else flops > 0
    if name in ("cpu_optimizer", "preprocess", "graph_hooks") and not twin:
        assert data["host_total_ms"] > 0
    if name == "recompile":
        assert (data["compiles_in_loop"] == 0) == twin
