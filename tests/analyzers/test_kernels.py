"""Kernel, launch, queue and fusion tables on a hand-built timeline whose every number is
worked out below, and on the runs captured on 2x H200 (samples/runs) and the corpus."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.findings import kernels as kernel_judge
from profkit.analyzers.findings.judge import judged
from profkit.analyzers.measure import kernels as K
from profkit.analyzers.measure.kernels import analyze_kernels
from profkit.analyzers.thresholds import Thresholds

from profkit import schema as S
from profkit.columns import values_in
from profkit.run.loader import load_run
from tests.analysed import loaded
from tests.conftest import CORPUS, REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x

US = 1000  # ns per us: the factories take us, the tables hold ns
RUNS = REPO / "samples" / "runs"
CORPUS_FILES = sorted(CORPUS.rglob("*.json.gz")) if CORPUS.is_dir() else []


def timeline():
    """Two steps of 200 us on stream 7 (times in us).

    step 1 [0, 200):   launches 10+4, 16+4, 22+4 (corr 1-3) -> short kernels a, b, c at 20, 26, 32
                       (5 us each; delays 20-14 = 26-20 = 32-26 = 6); launch 28+60 (slow, corr 4)
                       -> gemm 100-150 (delay 100-88 = 12)
    step 2 [200, 400): launches 210/216/222 +4 -> a, b, c at 220, 226, 232 (delays 6);
                       cudaGraphLaunch 250+10 (corr 8) -> graph_k1 300-320, graph_k2 320-340
                       (shared correlation: no per-op delay); cudaStreamSynchronize 340+55
    CPU ops (tid 100): aten::add [8, 15) around launch 1, aten::add [208, 215) around launch 5,
                       aten::linear [26, 96) > aten::mm [27, 90) > launch [28, 88)
    """
    ev = [step(1, 0.0, 200.0), step(2, 200.0, 200.0)]
    for base, corr in ((0.0, 1), (200.0, 5)):
        for i, name in enumerate(("elementwise_a", "elementwise_b", "elementwise_c")):
            ev.append(launch(base + 10 + 6 * i, 4.0, corr + i))
            ev.append(kernel(name, base + 20 + 6 * i, 5.0, corr + i))
    ev += [
        launch(28.0, 60.0, 4), kernel("gemm_x", 100.0, 50.0, 4),
        x("cudaGraphLaunch", "cuda_runtime", 250.0, 10.0, correlation=8),
        kernel("graph_k1", 300.0, 20.0, 8), kernel("graph_k2", 320.0, 20.0, 8),
        x("cudaStreamSynchronize", "cuda_runtime", 340.0, 55.0),
        x("aten::add", "cpu_op", 8.0, 7.0), x("aten::add", "cpu_op", 208.0, 7.0),
        x("aten::linear", "cpu_op", 26.0, 70.0), x("aten::mm", "cpu_op", 27.0, 63.0),
    ]
    return ev


@pytest.fixture
def run(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=timeline()))
    return load_run(path, cache=False)


def test_short_kernels_and_kernels_per_step(run):
    res = judged(analyze_kernels(run))
    short = res.tables["short_kernels"].iloc[0]
    assert short["kernels"] == 9
    assert short["short_kernels"] == 6  # a, b, c twice
    assert short["short_total_ns"] == 30 * US
    assert short["short_time_frac"] == pytest.approx(30 / 120)  # kernel time 65 + 55
    assert short["window_ns"] == 400 * US
    assert short["kernel_busy_frac"] == pytest.approx(120 / 400)  # no kernels overlap
    per_step = res.tables["kernels_per_step"].set_index("step")
    assert per_step.loc[1, "kernels"] == 4 and per_step.loc[1, "gpu_time_ns"] == 65 * US
    assert per_step.loc[2, "kernels"] == 5 and per_step.loc[2, "gpu_time_ns"] == 55 * US


def test_launch_delays_graphs_and_slow_calls(run):
    row = judged(analyze_kernels(run, Thresholds(launch_delay_ns=10 * US))).tables["launches"].iloc[0]
    assert row["launch_calls"] == 8  # 7 kernel launches + 1 graph launch, not the sync
    assert row["launch_time_ns"] == 94 * US  # 6 x 4 + 60 + 10
    assert row["launch_time_frac"] == pytest.approx(94 / 400)
    assert row["launch_median_ns"] == 4 * US
    assert row["launch_p95_ns"] == pytest.approx(42.5 * US)  # [4]*6, 10, 60: 10 + .65 * 50
    assert row["delay_median_ns"] == 6 * US  # 7 delays: six of 6 us, one of 12 us
    assert row["delay_p95_ns"] == pytest.approx(10.2 * US)  # 6 + 0.7 * 6
    assert row["delayed_launches"] == 1  # the 12 us one, above 10 us
    assert row["slow_runtime_calls"] == 1  # the 60 us launch; the 55 us sync is not counted
    assert row["slow_runtime_ns"] == 60 * US
    assert row["graph_launches"] == 1 and row["graph_gpu_ops"] == 2
    assert row["max_queue_depth"] == 3


def test_queue_depth_sweep(run):
    q = judged(analyze_kernels(run)).tables["queue_depth"].iloc[0]
    assert q["stream"] == 7 and q["gpu_ops"] == 9 and q["max_depth"] == 3
    # depth x time from 10 to 340 us: 6+12+9+6+9+12+113 (step 1), 6+12+9+12+6 (step 2),
    # 2 x 70 + 1 x 20 (both graph kernels enqueued at the graph launch, 250)
    assert q["mean_depth"] == pytest.approx(372 / 330)


def test_top_kernels_and_ops(run):
    res = judged(analyze_kernels(run))
    top = res.tables["top_kernels"].set_index("name")
    assert list(top.index[:1]) == ["gemm_x"]
    assert top.loc["gemm_x", "share"] == pytest.approx(50 / 120)
    assert top.loc["gemm_x", "subcls"] == "gemm"
    assert top.loc["elementwise_a", "count"] == 2 and top.loc["elementwise_a", "mean_ns"] == 5 * US
    ops = res.tables["top_ops"]
    assert list(ops["name"]) == ["aten::linear", "aten::add", "aten::mm"]  # by self time
    by = ops.set_index("name")
    assert by.loc["aten::linear", "self_ns"] == 7 * US  # 70 - mm's 63
    assert by.loc["aten::mm", "self_ns"] == 3 * US  # 63 - the launch's 60
    assert by.loc["aten::add", "self_ns"] == 6 * US and by.loc["aten::add", "count"] == 2
    assert by.loc["aten::add", "total_ns"] == 14 * US


def test_fusion_candidates(run):
    res = judged(analyze_kernels(run, Thresholds(fusion_min_count=2)))
    fusion = res.tables["fusion_candidates"]
    # the only all-short 3-gram
    assert list(fusion["sequence"]) == ["elementwise_a -> elementwise_b -> elementwise_c"]
    assert fusion.iloc[0]["count"] == 2 and fusion.iloc[0]["per_step"] == 1.0
    assert fusion.iloc[0]["total_ns"] == 30 * US
    assert [f.category for f in res.findings if f.category == "fusion"] == ["fusion"]
    assert not [f for f in judged(analyze_kernels(run)).findings if f.category == "fusion"]


def test_library_sorts_and_gemms_are_never_fusion_candidates(tmp_path):
    """Three passes of a library radix sort repeat as often as any elementwise chain, but no
    compiler fuses them; nor GEMMs."""
    ev = [step(1, 0.0, 1000.0)]
    names = ("void cub::DeviceRadixSortOnesweepKernel<...>", "void cub::DeviceRadixSortHistogramKernel",
             "sm90_xmma_gemm_bf16", "vectorized_elementwise_kernel<4, add>",
             "vectorized_elementwise_kernel<4, mul>", "reduce_kernel<512, sum>")
    t, corr = 10.0, 1
    for _ in range(12):
        for name in names:
            ev += [launch(t - 5, 2.0, corr), kernel(name, t, 3.0, corr)]
            t, corr = t + 6, corr + 1
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=ev))
    fusion = judged(analyze_kernels(load_run(path, cache=False))).tables["fusion_candidates"]
    assert len(fusion) and not fusion["sequence"].str.contains("Radix|gemm").any()
    assert "vectorized_elementwise_kernel<4, add> -> vectorized_elementwise_kernel<4, mul> -> " \
           "reduce_kernel<512, sum>" in set(fusion["sequence"])


def test_findings_on_the_hand_built_run(run, monkeypatch):
    findings = judged(analyze_kernels(run)).findings
    slow = [f for f in findings if "runtime calls" in f.message]
    assert len(slow) == 1 and slow[0].severity == "warning"  # 60 us = 15% of the step > 10%
    assert not [f for f in findings if "launch-bound" in f.message]  # 9 kernels: too few
    monkeypatch.setattr(kernel_judge, "MIN_KERNELS", 5)
    bound = [f for f in judged(analyze_kernels(run)).findings if "launch-bound" in f.message]
    assert len(bound) == 1 and bound[0].severity == "warning"  # 67% short, GPU busy 30%
    assert "CUDA graphs are already in use" in bound[0].message


def test_cpu_launch_run_is_launch_bound():
    res = judged(analyze_kernels(load_run(RUNS / "zoo" / "cpu_launch")))
    assert set(res.tables["kernels_per_step"]["kernels"]) == {2000}  # the script's loop
    short = res.tables["short_kernels"].iloc[0]
    assert short["short_frac"] > 0.9 and short["kernel_busy_frac"] < 0.2
    launches = res.tables["launches"].iloc[0]
    assert launches["launch_calls"] == 6000 and launches["launch_median_ns"] < 10 * US
    assert launches["delay_median_ns"] < 10 * US  # the GPU waits for each launch
    bound = [f for f in res.findings if f.category == "launch" and f.severity == "warning"]
    assert len(bound) == 1 and "launch-bound" in bound[0].message
    assert res.tables["fusion_candidates"].iloc[0]["per_step"] > 900  # mul_, add_ alternate


def test_compute_run_is_not_launch_bound():
    res = judged(analyze_kernels(load_run(RUNS / "zoo" / "compute")))
    assert not [f for f in res.findings if f.severity == "warning"]
    assert res.tables["top_kernels"].iloc[0]["subcls"] == "gemm"
    assert res.tables["launches"].iloc[0]["delay_median_ns"] > 1_000 * US  # CPU runs ahead


@pytest.mark.skipif(not CORPUS_FILES, reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_traces(path):
    run = loaded(path)
    res = judged(analyze_kernels(run))
    assert set(res.tables) == {name for name, _ in K.TABLES}
    if any(rd.has_gpu for rd in run.ranks.values()):
        assert len(res.tables["top_kernels"]) > 0
    else:
        assert all(t.empty for t in res.tables.values())
        assert [(f.category, f.severity) for f in res.findings] == [("coverage", "info")]


def test_runtime_call_findings_count_only_the_used_steps():
    """diagnosis/graph_capture: graph instantiation (7.8 ms), cudaMalloc and cudaGraphDestroy
    run in the capture step, which the verdict leaves out; only cudaGraphLaunch is slow in the
    used steps. A runtime-calls finding names only calls of the used steps (one named the
    capture step's calls and promised 1.6 ms/step). Checked on the events themselves."""
    from profkit.analyzers.analyze import analyze

    run = load_run(RUNS / "diagnosis" / "graph_capture")
    a = analyze(run)
    steps = a.table("step_breakdown")
    used = set(steps.loc[steps["used"].astype(bool), "step"])
    ev = run.ranks[0].events
    rt = ev[ev[S.KIND].isin((S.KIND_RUNTIME, S.KIND_DRIVER)) & (ev[S.DUR_NS] > 50_000)]
    in_used = set(rt.loc[rt[S.STEP].isin(used), S.NAME].astype(str))
    left_out = set(rt.loc[~rt[S.STEP].isin(used) & (rt[S.STEP] >= 0), S.NAME].astype(str))
    assert "cudaGraphInstantiateWithFlags" in left_out - in_used
    for f in [f for f in a.findings if f.category == "runtime_calls"]:
        assert set(f.evidence["calls"]) <= in_used, f.evidence["calls"]


@pytest.mark.parametrize("folder", ["samples/runs/stock_ddp", "tests/data/public/amd_mi210_gpu_only",
                                    "tests/data/public/vllm_decode_replay"])
def test_kernel_totals_are_the_kernels_grouped_by_their_names_as_text(folder):
    """kernel_totals groups on category codes; the answer is pandas' grouping of the name,
    class and sub-class as text, in the same order (real traces, every rank)."""
    run = loaded(REPO / folder)
    keys = [S.NAME, S.CLASS, S.SUBCLASS]
    for rank, rd in run.ranks.items():
        k = K.kernels_of(rd)[keys + [S.DUR_NS]].astype({c: str for c in keys})
        expect = k.groupby(keys)[S.DUR_NS].agg(["size", "sum"]).reset_index().assign(rank=rank)
        assert len(expect) > 1
        pd.testing.assert_frame_equal(K.kernel_totals(rank, rd), expect)


def test_kernel_totals_leave_out_kernels_without_a_class_as_grouping_text_does():
    rd = loaded(REPO / "samples/runs/stock_ddp").ranks[0]  # a copy of its own
    kernel_rows = np.flatnonzero(values_in(rd.events[S.KIND], (S.KIND_KERNEL,)))
    cls = rd.events[S.CLASS].copy()
    cls.iloc[kernel_rows[:5]] = np.nan
    rd.events[S.CLASS] = cls
    keys = [S.NAME, S.CLASS, S.SUBCLASS]
    k = K.kernels_of(rd)[keys + [S.DUR_NS]].astype({c: str for c in keys})
    expect = k.groupby(keys)[S.DUR_NS].agg(["size", "sum"]).reset_index().assign(rank=0)
    got = K.kernel_totals(0, rd)
    pd.testing.assert_frame_equal(got, expect)
    assert got["size"].sum() == len(kernel_rows) - 5
