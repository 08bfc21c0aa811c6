"""Compilation inside the profiled steps: torch.compile's ranges recognised by name, compiling
steps left out of the verdict with the reason, and the finding with its fix.

Ground truth for samples/runs/why/recompile comes from the workload itself (SUMMARY.txt):
Dynamo's own counter saw a compile in every step of the loop, and the script timed the host
side of each step's compiled call; its --mark-dynamic twin compiled nothing in the loop."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.steps import choose_steps

from profkit.classify.compilation import compile_phase
from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x

WHY = REPO / "samples" / "runs" / "why"


def workload(name: str) -> dict:
    for line in (WHY / "SUMMARY.txt").read_text().splitlines():
        key, _, payload = line.partition(" PROFKIT_SAMPLE ")
        if key == f"why_{name}":
            return json.loads(payload.replace("NaN", "null"))
    raise KeyError(name)


@pytest.fixture(scope="module")
def recompile():
    return analyze(load_run(WHY / "recompile", cache=False))


def test_the_vocabulary_knows_compilation_from_running_compiled_code():
    compiling = {"dynamo": "dynamo", "entire_frame_compile": "dynamo",
                 "_compile.compile_inner (dynamo_timed)": "dynamo",
                 "_compile.<locals>.compile_inner (dynamo_timed)": "dynamo",  # torch < 2.5
                 "backend_compile": "aot_autograd", "entire_backward_compile": "aot_autograd",
                 "create_aot_dispatcher_function (dynamo_timed)": "aot_autograd",
                 "inductor_compile": "inductor", "compile_fx_inner (dynamo_timed)": "inductor",
                 "compile_fx.<locals>.bw_compiler": "inductor", "async_compile.wait": "inductor",
                 "CachingAutotuner.benchmark_all_configs": "autotune",
                 "CachingAutotuner.benchmark_all_configs (dynamo_timed)": "autotune"}
    running = ["Torch-Compiled Region: 0/3", "TorchDynamo Cache Lookup", "CompiledFunction",
               "CompiledFunctionBackward", "## Call CompiledFxGraph fbf5cpxatuaetps457 ##",
               "AOTDispatcher Runtime Wrapper Prologue", "guard_collective (dynamo_timed)",
               "triton_poi_fused__unsafe_view_gelu_2", "aten::mm", "ProfilerStep#3",
               "torch/_dynamo/eval_frame.py(632): _fn", "dynamo_step", "my_compile_step"]
    names = np.array(list(compiling) + running, dtype=object)
    assert compile_phase(names).tolist() == list(compiling.values()) + [""] * len(running)


def test_every_recompiling_step_of_the_recompile_sample_is_named_with_its_compile_time(recompile):
    truth = workload("recompile")
    assert truth["compiles_in_loop"] == truth["steps"]  # Dynamo compiled in every step
    report = recompile.run["steps"]["0"]
    profiled = [2, 3, 4]  # wait 1, warm-up 1, 3 active (run.json)
    # recompiling is this run's steady state: its steps stay its steps (step time, diff) ...
    assert report["used"] == profiled and report["excluded"] == []
    assert [c["step"] for c in report["compiled"]] == profiled
    # compilation runs inside the compiled call the script timed on the host: most of it
    # (the twin's call takes 2-22 ms), never more
    calls_ms = truth["host_compiled_call_ms_per_step"][2:5]
    for c, call_ms in zip(report["compiled"], calls_ms):
        assert 0.9 * call_ms <= c["compile_ms"] <= call_ms
    # ... but no bottleneck verdict is read from them: that would judge the compiler
    assert recompile.verdict["primary"] is None
    assert recompile.verdict["summary"].startswith("every profiled step compiles (3 of 3")
    assert recompile.table("rank_breakdown").empty


def test_the_recompile_finding_advises_dynamic_shapes_not_cuda_graphs(recompile):
    [f] = [f for f in recompile.findings if f.category == "compile"]
    assert f.severity == "critical" and f.evidence["compiling_steps"] == [2, 3, 4]
    assert f.evidence["frame_compiles"] == 3  # one Dynamo compile per step, as its counter says
    assert "mark_dynamic" in f.recommendation and "bucket" in f.recommendation
    assert "dynamic=True" in f.recommendation
    for g in recompile.findings:
        text = (g.message + g.recommendation).lower()
        assert "cuda graph" not in text and "reduce-overhead" not in text, g
    assert recompile.findings[0] is f


def test_no_saving_of_the_recompile_sample_exceeds_a_step(recompile):
    steps = recompile.table("step_breakdown")
    longest_ms = steps["step_ns"].max() / 1e6
    saving = [f for f in recompile.findings if f.estimated_saving]
    assert saving
    for f in saving:
        assert f.estimated_saving["ms_per_step"] <= longest_ms and f.estimated_saving["fraction"] <= 1
    [f] = [f for f in saving if f.category == "compile"]
    assert f.estimated_saving["per"] == "compiling step"
    assert f.estimated_saving["ms_per_step"] <= f.evidence["compiling_step_ms"]


def test_the_mark_dynamic_twin_is_judged_as_before():
    truth = workload("recompile_fixed")
    assert truth["compiles_in_loop"] == 0
    a = analyze(load_run(WHY / "recompile_fixed", cache=False))
    assert a.run["steps"]["0"]["used"] == [2, 3, 4] and a.run["steps"]["0"]["compiled"] == []
    assert a.verdict["primary"] == "cpu_launch"  # 1-layer steps of a few ms, host-bound
    assert not [f for f in a.findings if f.category == "compile"]
    assert a.table("compilation").empty


def _compile_ranges(t0: float, dur: float, tid: int = 100) -> list[dict]:
    """One Dynamo frame compile as torch records it: nested ranges, each under two names."""
    return [x("dynamo", "cpu_op", t0, dur, tid=tid),
            x("entire_frame_compile", "cpu_op", t0 + 1, dur - 2, tid=tid),
            x("_compile.compile_inner (dynamo_timed)", "cpu_op", t0 + 1, dur - 2, tid=tid),
            x("backend_compile", "cpu_op", t0 + 10, dur - 20, tid=tid),
            x("inductor_compile", "cpu_op", t0 + 20, dur - 40, tid=tid)]


def _steady_steps_with_one_compile(compile_step: int | None, n: int = 6) -> list[dict]:
    """``n`` steps of 1 ms: 10 us of launch, a 980 us GEMM; every step runs compiled code
    (a "Torch-Compiled Region" around the launch). Step ``compile_step`` first compiles for
    250 us (the GPU idles), which makes it 1.25 ms: within the outlier tolerance (25%)."""
    events, t = [], 0.0
    for i in range(n):
        extra = 250.0 if i == compile_step else 0.0
        events.append(step(i, t, 1000.0 + extra))
        if extra:
            events += _compile_ranges(t + 1.0, extra - 2.0)
        events += [x("TorchDynamo Cache Lookup", "cpu_op", t + extra + 0.5, 0.4),
                   x("Torch-Compiled Region: 0/1", "cpu_op", t + extra + 1.0, 15.0),
                   launch(t + extra + 2.0, 5.0, i + 1),
                   kernel("sm90_xmma_gemm_bf16", t + extra + 15.0, 980.0, i + 1)]
        t += 1000.0 + extra
    return events


def test_a_compiling_step_among_steady_ones_is_left_out_with_the_reason(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(
        rank=0, world_size=1, events=_steady_steps_with_one_compile(3)))
    a = analyze(load_run(path, cache=False))
    report = a.run["steps"]["0"]
    assert report["used"] == [0, 1, 2, 4, 5]
    [left] = report["excluded"]
    assert left["step"] == 3 and left["reason"].startswith("compiles: 0.248 ms of 1.25 ms")
    assert report["compiled"] == [{"step": 3, "compile_ms": 0.248}]
    assert a.verdict["primary"] == "compute"
    [f] = [f for f in a.findings if f.category == "compile"]
    assert f.severity == "info" and f.estimated_saving is None  # one compile: a warm-up
    assert f.evidence["frame_compiles"] == 1 and f.evidence["compiling_steps"] == [3]
    assert "before profiling" in f.recommendation


def test_steps_without_compilation_are_untouched(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(
        rank=0, world_size=1, events=_steady_steps_with_one_compile(None)))
    a = analyze(load_run(path, cache=False))
    assert a.run["steps"]["0"]["used"] == [0, 1, 2, 3, 4, 5]
    assert a.run["steps"]["0"]["compiled"] == [] and a.table("step_breakdown")["compile_ns"].eq(0).all()
    assert a.table("compilation").empty and not [f for f in a.findings if f.category == "compile"]


def test_compilation_is_cut_out_of_a_window_without_steps(tmp_path):
    """No ProfilerStep ranges: the one window is judged without its compile time."""
    events = [e for e in _steady_steps_with_one_compile(3) if not e["name"].startswith("Prof")]
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=events))
    a = analyze(load_run(path, cache=False))
    steps = a.table("step_breakdown")
    assert steps["used"].all() and steps["compile_ns"].sum() == 0
    assert steps["step_ns"].sum() == pytest.approx(6_000_000 - 15_000, abs=300_000)
    assert any("torch.compile compiled for 0.248 ms inside the window" in n for n in a.run["notes"])


def test_choose_steps_leaves_out_compiling_steps_unless_every_step_compiles():
    table = pd.DataFrame({"step": [1, 2, 3, 4, 5], "step_ns": [100, 110, 100, 102, 99]})
    compile_ns = np.array([0, 10, 0, 0, 0])
    used, reasons = choose_steps(table, np.zeros(5), None, 0.25, compile_ns, 0.05)
    assert used.tolist() == [True, False, True, True, True] and reasons[1].startswith("compiles")
    used, reasons = choose_steps(table, np.zeros(5), None, 0.25, np.full(5, 90), 0.05)
    assert used.all() and reasons == [""] * 5  # every step compiles: the run's steady state
    used, _ = choose_steps(table, np.zeros(5), (2, 3), 0.25, np.full(5, 90), 0.05)
    assert used.tolist() == [False, True, True, False, False]  # --steps decides


