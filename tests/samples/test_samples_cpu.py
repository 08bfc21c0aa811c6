"""CPU smoke tests of the sample workloads (samples/): each runs a script in a subprocess at
tiny sizes and checks what it wrote. The multi-process (torchrun, gloo) runs are marked slow.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
ZOO = SAMPLES / "zoo"
ZOO_SCRIPTS = ("compute", "communication", "cpu_launch", "data_loading", "host_sync",
               "round_trip", "transfer", "straggler", "balanced")
GPU_ONLY_ZOO_SCRIPTS = ("graph_capture",)  # CUDA graphs: no CPU run
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return env


def run(cmd: list[str], cwd: Path, timeout: float = 180) -> str:
    """Run cmd, fail the test with its output unless it exits 0; return stdout+stderr."""
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{out[-4000:]}"
    return out


def summary(output: str) -> dict:
    lines = [ln for ln in output.splitlines() if ln.startswith("PROFKIT_SAMPLE ")]
    assert len(lines) == 1, f"expected one PROFKIT_SAMPLE line (rank 0 only):\n{output[-2000:]}"
    data = json.loads(lines[0].removeprefix("PROFKIT_SAMPLE "))
    assert data["median_step_ms"] > 0
    return data


def traces(out: Path) -> list[Path]:
    return sorted(out.rglob("*.pt.trace.json.gz"))


def events(trace: Path) -> list[dict]:
    with gzip.open(trace, "rt") as f:
        doc = json.load(f)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def step_numbers(evs: list[dict]) -> list[int]:
    return sorted(int(m.group(1)) for e in evs
                  if e.get("cat") == "user_annotation"
                  and (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"])))


def tiny(script: Path, out: Path, *extra: str) -> list[str]:
    return [str(script), "--tiny", "--device", "cpu", "--profiler", "torch",
            "--out", str(out), *extra]


# ------------------------------------------------------------------------------ train_gpt
def test_train_gpt_single_process_writes_stock_trace(tmp_path: Path) -> None:
    out = tmp_path / "gpt"
    data = summary(run([sys.executable, *tiny(SAMPLES / "train_gpt.py", out, "--steps", "5")],
                       tmp_path))
    assert (data["parallel"], data["world_size"], data["steps"]) == ("none", 1, 5)
    files = traces(out)
    assert len(files) == 1 and re.fullmatch(r"rank0\.\d+\.pt\.trace\.json\.gz", files[0].name)
    evs = events(files[0])
    assert step_numbers(evs) == [2, 3, 4]  # wait=1, warmup=1, active=3
    names = {e["name"] for e in evs}
    assert "aten::scaled_dot_product_attention" in names
    assert any(n.startswith("Optimizer.step#AdamW") for n in names)


def test_too_few_steps_for_the_schedule_is_refused(tmp_path: Path) -> None:
    cmd = [sys.executable, *tiny(SAMPLES / "train_gpt.py", tmp_path / "x", "--steps", "4")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0 and "too few" in proc.stderr
    assert not traces(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_train_gpt_two_ranks_gloo(tmp_path: Path, parallel: str) -> None:
    out = tmp_path / parallel
    data = summary(run([*TORCHRUN, *tiny(SAMPLES / "train_gpt.py", out, "--steps", "5",
                                         "--parallel", parallel)], tmp_path, timeout=300))
    assert (data["parallel"], data["world_size"]) == (parallel, 2)
    files = traces(out)
    assert sorted(f.name.split(".")[0] for f in files) == ["rank0", "rank1"]
    for f in files:
        evs = events(f)
        assert step_numbers(evs) == [2, 3, 4]
        assert any(e["name"].startswith("gloo:") for e in evs), f"no gloo collective in {f}"


def test_train_gpt_profkit_profiler(tmp_path: Path) -> None:
    try:
        from profkit.collectors import mark, profile  # noqa: F401
    except ImportError:
        pytest.skip("profkit.collectors is not importable")
    out = tmp_path / "run"
    cmd = [sys.executable, str(SAMPLES / "train_gpt.py"), "--tiny", "--device", "cpu",
           "--profiler", "profkit", "--steps", "5", "--out", str(out)]
    assert summary(run(cmd, tmp_path))["profiler"] == "profkit"
    run_json = json.loads((out / "run.json").read_text())
    assert run_json["status"] == "ok" and run_json["world_size"] == 1
    trace = out / "traces" / "rank0.pt.trace.json.gz"
    assert step_numbers(events(trace)) == [2, 3, 4]


# ------------------------------------------------------------------------------- infer_kv
def test_infer_kv_marks_prefill_and_decode(tmp_path: Path) -> None:
    out = tmp_path / "infer"
    data = summary(run([sys.executable, *tiny(SAMPLES / "infer_kv.py", out,
                                              "--new-tokens", "3")], tmp_path))
    assert data["decoded_tokens_per_step"] == 2 * 3
    [trace] = traces(out)
    evs = events(trace)
    steps = [e for e in evs if e.get("cat") == "user_annotation"
             and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 3
    for name in ("profkit/prefill", "profkit/decode"):
        ranges = [e for e in evs if e["name"] == name]
        assert len(ranges) == 3, f"{name}: one range per generate call expected"
        assert all(any(s["ts"] <= r["ts"] <= s["ts"] + s["dur"] for s in steps)
                   for r in ranges)
    prefill = min(e["ts"] for e in evs if e["name"] == "profkit/prefill")
    decode = min(e["ts"] for e in evs if e["name"] == "profkit/decode")
    assert prefill < decode


# ------------------------------------------------------------------------------------ zoo
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_SCRIPTS)
def test_zoo_script_runs_on_cpu(tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    data = summary(run([sys.executable, *tiny(ZOO / f"{name}.py", out)], tmp_path))
    assert data["label"] == {"round_trip": "cpu_launch"}.get(name, name)
    [trace] = traces(out)
    assert step_numbers(events(trace)) == [2, 3, 4]


def test_zoo_data_loading_host_waits_in_dataloader(tmp_path: Path) -> None:
    out = tmp_path / "dl"
    run([sys.executable, *tiny(ZOO / "data_loading.py", out, "--ms-per-batch", "20")],
        tmp_path)
    [trace] = traces(out)
    evs = events(trace)
    loader = [e for e in evs if e["name"].startswith("enumerate(DataLoader)")]
    assert len(loader) == 3
    assert all(e["dur"] >= 15_000 for e in loader)  # us: the slow __getitem__ is inside


@pytest.mark.slow
def test_zoo_straggler_two_ranks_only_slow_rank_does_extra_work(tmp_path: Path) -> None:
    out = tmp_path / "straggler"
    run([*TORCHRUN, *tiny(ZOO / "straggler.py", out, "--slow-rank", "1")], tmp_path,
        timeout=300)
    files = {f.name.split(".")[0]: f for f in traces(out)}
    assert sorted(files) == ["rank0", "rank1"]
    extra = {r: sum(e["name"] == "profkit/straggler_extra" for e in events(f))
             for r, f in files.items()}
    assert extra == {"rank0": 0, "rank1": 3}


# ---------------------------------------------------------------------------- capture script
CAPTURE_SCRIPTS = ("capture_h200.sh", "capture_diagnosis.sh", "capture_frameworks.sh",
                   "capture_large.sh")


@pytest.mark.parametrize("name", CAPTURE_SCRIPTS)
def test_capture_scripts_keep_nvls_off_and_parse(name: str) -> None:
    """Every capture script sources capture_lib.sh, which exports the variables that keep
    NVLink multicast off on the lent machines (a program using it can take a shared host's
    GPUs out of service)."""
    script = SAMPLES / name
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/capture_lib.sh"' in script.read_text()
    lib = (SAMPLES / "capture_lib.sh").read_text()
    exports = [ln for ln in lib.splitlines() if ln.startswith("export ")]
    for var in ("NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
                "NVSHMEM_DISABLE_NVLS=1"):
        assert any(var in ln for ln in exports), f"{var} is not exported"


def test_every_zoo_script_is_captured() -> None:
    text = "".join((SAMPLES / n).read_text() for n in CAPTURE_SCRIPTS)
    for name in ZOO_SCRIPTS + GPU_ONLY_ZOO_SCRIPTS:
        assert f"{name}" in text, f"zoo script {name} is not captured"


# ------------------------------------------------------------- memory and parallelism cases
def test_memory_cases_checkpointing_labels_the_recompute(tmp_path: Path) -> None:
    """ckpt: every checkpointed block runs twice; the second run (in the backward pass) is
    inside one label/recompute range, and FlopCounterMode counts it in the executed FLOPs."""
    out = tmp_path / "ckpt"
    data = summary(run([sys.executable, "memory_cases.py", "--case", "ckpt", "--tiny",
                        "--device", "cpu", "--profiler", "torch", "--out", str(out)], SAMPLES))
    assert data["checkpointing"] is True
    layers, active = 2, 3  # TINY layers, the schedule's active steps
    names = [e["name"] for t in traces(out) for e in events(t)]
    assert names.count("label/recompute") == layers * active
    # the recompute is the blocks' forward again: more executed than model FLOPs, less than 2x
    assert data["model_flops_per_step"] < data["executed_flops_per_step"]
    assert data["executed_flops_per_step"] < 2 * data["model_flops_per_step"]


def test_memory_cases_varlen_changes_the_length_every_step(tmp_path: Path) -> None:
    data = summary(run([sys.executable, "memory_cases.py", "--case", "varlen", "--tiny",
                        "--device", "cpu", "--out", str(tmp_path / "v")], SAMPLES))
    assert len(set(data["seq_per_step"])) > 1
    assert all(16 <= s <= 32 for s in data["seq_per_step"])


@pytest.mark.slow
def test_parallel_cases_zero3_two_ranks_gloo(tmp_path: Path) -> None:
    """DeepSpeed ZeRO-3 on 2 CPU ranks, where DeepSpeed is installed (not a test
    dependency): the labels count the tiny GPT's parameters (36, the tied head once), all
    under the default persistence threshold of 1e5 elements."""
    pytest.importorskip("deepspeed")
    out = tmp_path / "zero3"
    data = summary(run([*TORCHRUN, "parallel_cases.py", "--case", "zero3", "--tiny", "--device",
                        "cpu", "--profiler", "torch", "--out", str(out)],
                       SAMPLES, timeout=300))
    assert len(traces(out)) == 2
    assert data["zero_config"]["stage"] == 3
    assert data["params"] == data["persistent_params"] == 36


@pytest.mark.slow
@pytest.mark.parametrize("case", ["pipeline", "experts", "fsdp", "tp"])
def test_parallel_cases_two_ranks_gloo(tmp_path: Path, case: str) -> None:
    out = tmp_path / case
    extra = ["--skew", "3"] if case == "experts" else []
    data = summary(run([*TORCHRUN, "parallel_cases.py", "--case", case, "--tiny", "--device",
                        "cpu", "--profiler", "torch", "--out", str(out), *extra], SAMPLES,
                       timeout=300))
    assert len(traces(out)) == 2
    assert len(data["step_ms_per_rank"]) == 2
    if case == "experts":  # expert 0 gets 3 shares of 4 from each of the two ranks
        tokens = 64  # TINY
        assert data["tokens_received_per_rank"] == [2 * (tokens * 3 // 4), 2 * (tokens // 4)]
    if case == "pipeline":
        assert data["bubble_theory"] == round(1 / (4 + 1), 4)
