"""profile() in one process on CPU: run.json, traces, failure handling, options."""

from __future__ import annotations

import dataclasses
import inspect
import json
import pickle

import pytest
import torch
from profkit.collectors import CollectorError, OutputDirError, ProfileConfig, mark, profile
from profkit.collectors.profile import _CONFIG_EXTRAS

from profkit.errors import ProfkitError
from profkit.nccl.flight_recorder import parse_flight_recorder


def train(p, steps, model=None, fail_at=None):
    model = model or torch.nn.Linear(16, 16)
    for i in range(steps):
        if i == fail_at:
            raise RuntimeError(f"boom at {i}")
        with mark("forward"):
            loss = model(torch.randn(4, 16)).sum()
        loss.backward()
        p.step()


def run_json(d):
    return json.loads((d / "run.json").read_text())


def step_names(trace_reader, path):
    return {n for n in trace_reader.names(trace_reader.read(path)) if n.startswith("ProfilerStep")}


def test_ok_run_writes_contract(tmp_path, trace_reader, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("MY_SECRET_TOKEN", "x")
    with profile(tmp_path, wait=1, warmup=1, active=2, nvml=False) as p:
        train(p, 5)
    doc = run_json(tmp_path)
    assert doc["schema"] == "profkit.run/1" and doc["status"] == "ok" and doc["error"] is None
    assert doc["world_size"] == 1 and doc["clock_offsets_ns"] == {"0": 0}
    assert doc["ended_ns"] >= doc["started_ns"] > 0
    assert doc["ranks"]["0"]["pid"] > 0 and doc["hosts"] == [doc["ranks"]["0"]["host"]]
    assert doc["versions"]["torch"] == torch.__version__
    assert doc["env"]["NCCL_DEBUG"] == "INFO" and "MY_SECRET_TOKEN" not in doc["env"]
    assert doc["profiler"]["active"] == 2 and doc["profiler"]["record_shapes"] is True
    assert isinstance(doc["command"], list) and doc["run_id"]
    trace = tmp_path / "traces" / "rank0.pt.trace.json.gz"
    assert step_names(trace_reader, trace) == {"ProfilerStep#2", "ProfilerStep#3"}
    assert "profkit/forward" in trace_reader.names(trace_reader.read(trace))
    rank = json.loads((tmp_path / "ranks" / "rank0.json").read_text())
    assert rank["status"] == "ok" and rank["traces"] == ["rank0.pt.trace.json.gz"]


def test_run_json_records_the_torch_backend_switches_as_the_capture_started(tmp_path):
    """cudnn.benchmark and the TF32 switches as the job set them before the capture (the
    analysis names benchmark mode only where it was on)."""
    was = torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.benchmark = torch.backends.cuda.matmul.allow_tf32 = True
    try:
        precision = torch.get_float32_matmul_precision()  # "high": TF32 on sets it
        with profile(tmp_path, wait=1, warmup=1, active=2, nvml=False) as p:
            train(p, 5)
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32 = was
    assert run_json(tmp_path)["torch_settings"] == {
        "cudnn_benchmark": True, "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32, "matmul_allow_tf32": True,
        "float32_matmul_precision": precision}
    assert precision == "high"


def test_exception_marks_failed_keeps_trace_and_propagates_same_object(tmp_path, trace_reader):
    seen = []
    with pytest.raises(RuntimeError) as info:
        with profile(tmp_path, wait=0, warmup=0, active=10, nvml=False) as p:
            try:
                train(p, 10, fail_at=3)
            except RuntimeError as e:
                seen.append(e)
                raise
    assert info.value is seen[0]
    doc = run_json(tmp_path)
    assert doc["status"] == "failed"
    assert doc["error"] == {"type": "RuntimeError", "message": "boom at 3"}
    names = step_names(trace_reader, tmp_path / "traces" / "rank0.pt.trace.json.gz")
    assert {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= names


def test_keyboard_interrupt_is_recorded(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with profile(tmp_path, wait=0, warmup=0, active=3, nvml=False) as p:
            train(p, 1)
            raise KeyboardInterrupt
    assert run_json(tmp_path)["error"]["type"] == "KeyboardInterrupt"
    assert (tmp_path / "traces" / "rank0.pt.trace.json.gz").exists()


def test_inside_inference_mode(tmp_path, trace_reader):
    model = torch.nn.Linear(16, 16)
    with torch.inference_mode(), profile(tmp_path, wait=0, warmup=1, active=2, nvml=False) as p:
        for _ in range(4):
            with mark("decode"):
                model(torch.randn(2, 16))
            p.step()
    assert run_json(tmp_path)["status"] == "ok"
    assert "profkit/decode" in trace_reader.names(
        trace_reader.read(tmp_path / "traces" / "rank0.pt.trace.json.gz"))


def test_decorator_and_repeat_cycles(tmp_path):
    p = profile(tmp_path, wait=0, warmup=1, active=1, repeat=2, nvml=False)

    @p
    def job():
        train(p, 6)
        return 42

    assert job() == 42
    names = sorted(f.name for f in (tmp_path / "traces").iterdir())
    assert names == ["rank0.cycle1.pt.trace.json.gz", "rank0.pt.trace.json.gz"]
    assert run_json(tmp_path)["status"] == "ok"


def test_strict_unwritable_or_full_out_dir_fails_before_training(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(OutputDirError, match="file"):
        with profile(not_a_dir, nvml=False, strict=True):
            pytest.fail("body must not run")
    with pytest.raises(ProfkitError, match="free"):
        with profile(tmp_path / "run", nvml=False, min_free_bytes=2**62, strict=True):
            pytest.fail("body must not run")


@pytest.mark.parametrize("where", ["under a file", "too little space"])
def test_a_capture_that_cannot_start_warns_and_the_job_goes_on(tmp_path, caplog, where):
    """The same policy as a write that fails during the job: the capture stops, not the
    job. A path under a regular file is unwritable even for root."""
    (tmp_path / "file").write_text("x")
    out, free = (tmp_path / "file" / "run", 256 * 2**20) if where == "under a file" else (
        tmp_path / "run", 2**62)
    with caplog.at_level("WARNING", logger="profkit.collectors.profile"):
        with profile(out, nvml=False, min_free_bytes=free) as p:
            train(p, 3)
    assert p.step_num == 3 and p.run_dir is None and p.session is None
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"no capture into {out}" in warning and "the job goes on" in warning
    assert not (out / "run.json").exists()


def test_out_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.delenv("PROFKIT_RUN_DIR", raising=False)
    with pytest.raises(CollectorError, match="PROFKIT_RUN_DIR"):
        profile()
    monkeypatch.setenv("PROFKIT_RUN_DIR", str(tmp_path / "envrun"))
    with profile(wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 2)
    assert run_json(tmp_path / "envrun")["status"] == "ok"


def test_nvml_fake_sampled_and_driver_recorded(tmp_path, fake_nvml):
    import numpy as np

    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=fake_nvml(), nvml_gpus=[0],
                 nvml_hz=50.0) as p:
        train(p, 2)
    chunks = sorted((tmp_path / "nvml").glob("rank0.*.npz"))
    assert chunks and np.load(chunks[0])["power_w"][0] == 350.5
    assert run_json(tmp_path)["versions"]["driver"] == "580.159.04"


def test_flight_recorder_dump_when_enabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "100")
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 1)
    dump = tmp_path / "nccl" / "flight_recorder_rank0.pkl"
    if not dump.exists():
        pytest.skip("this torch build has no flight-recorder dump API")
    assert "version" in pickle.loads(dump.read_bytes())
    assert len(parse_flight_recorder(dump.read_bytes(), rank=0).columns) > 10


def test_no_flight_recorder_dump_when_disabled(tmp_path, monkeypatch):
    for k in ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE"):
        monkeypatch.delenv(k, raising=False)
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False) as p:
        train(p, 1)
    assert not (tmp_path / "nccl").exists()


def test_reentering_the_same_context_is_refused(tmp_path):
    p = profile(tmp_path, wait=0, warmup=0, active=1, nvml=False)
    with p, pytest.raises(CollectorError, match="twice"):
        with p:
            pass


def test_user_on_trace_ready_is_still_called(tmp_path):
    calls = []
    with profile(tmp_path, wait=0, warmup=0, active=1, nvml=False,
                 on_trace_ready=lambda prof: calls.append(prof)) as p:
        train(p, 2)
    assert len(calls) == 1
    assert (tmp_path / "traces" / "rank0.pt.trace.json.gz").exists()


def test_profile_defaults_are_profile_configs(tmp_path):
    """profile()'s keyword defaults are ProfileConfig's field defaults, every field can be
    set through profile(), and profile() with no options builds ProfileConfig()."""
    fields = {f.name for f in dataclasses.fields(ProfileConfig)}
    params = inspect.signature(profile).parameters
    named = {name: p.default for name, p in params.items()
             if name in fields and p.kind is p.KEYWORD_ONLY}
    assert named == {name: getattr(ProfileConfig(), name) for name in named}
    assert fields == set(named) | set(_CONFIG_EXTRAS) | {"torch_profiler_kwargs"}
    assert profile(tmp_path).config == ProfileConfig()
