"""The kernel roofline on hand-built runs whose every number is worked out below: its table
(the contract another analyzer joins Nsight Compute counters to), the classes, the
memory-bound finding and its fixes, and the compute advice memory-bound work must not get."""

import numpy as np
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.roofline import fix_list
from profkit.analyzers.measure.memruns import fusion_runs
from profkit.analyzers.measure.roofline import BOUNDS, ROOFLINE_COLUMNS
from profkit.analyzers.report.export import table_files
from profkit.analyzers.report.render import to_json, to_text

from profkit.run.loader import load_run
from tests.factories import kernel, launch, step, trace_doc, write_trace, x

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 80 * 10**9}
PEAK_GBPS = 3350.0  # H100 SXM HBM3 (analyzers/measure/devices.py)
N, E, F = 100_000, 1_000_000, 256  # nodes, edges, features


def op(name, ts, dur, ext, dims, types, concrete=None, **extra):
    args = {"External id": ext, "Input Dims": dims, "Input type": types,
            "Concrete Inputs": concrete or [""] * len(dims), **extra}
    return x(name, "cpu_op", ts, dur, **args)


def launched(name, op_ts, ext, corr, ts, dur, stream=7):
    """The launch call (inside the op on the host) and its kernel, linked by correlation
    and by the op's External id."""
    return [launch(op_ts + 1.0, 2.0, corr),
            kernel(name, ts, dur, corr, stream=stream, **{"External id": ext})]


def gnn_steps(n_steps=2):
    """Message passing over 1e6 edges of 256 fp32 features, 3 ms steps:

    - index_select of 1e6 rows of x [1e5, 256]: 8 MB of indices + 1.024 GB of rows read,
      1.024 GB written, in 1200 us: 1713 GB/s, memory-bound (0 FLOPs);
    - scatter_add_ of those rows into [1e5, 256] (index [1e6, 256] int64: 2.048 GB; src
      1.024 GB; the target rows read and written: 1.024 GB each) in 720 us;
      1200 + 720 = 1920 us: 64% of the step in gather / scatter;
    - mm [1e5, 256] x [256, 256] fp32 (13.1 GFLOP, sm80 xmma fp32) in 210 us: 7% of the
      step, math-bound (62 TFLOP/s of the 66.9 fp32 peak);
    - relu of the output [1e5, 256] in 40 us (102 MB read + written: memory-bound).
    """
    events = []
    corr = 0
    for s in range(n_steps):
        t0 = 3000.0 * s
        events.append(step(s + 1, t0, 3000.0))
        base = 10 * s
        parts = [
            ("aten::index_select", [[N, F], [], [E]], ["float", "Scalar", "long int"],
             ["", "0", ""], "void at::native::indexSelectLargeIndex<float, long, unsigned int>", 1200.0),
            ("aten::scatter_add_", [[N, F], [], [E, F], [E, F]],
             ["float", "Scalar", "long int", "float"], ["", "0", "", ""],
             "void at::native::_scatter_gather_elementwise_kernel<128, 8>", 720.0),
            ("aten::mm", [[N, F], [F, F]], ["float", "float"], None,
             "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8", 210.0),
            ("aten::relu", [[N, F]], ["float"], None,
             "void at::native::vectorized_elementwise_kernel<4, at::native::clamp_min>", 40.0),
        ]
        host, gpu = t0 + 5.0, t0 + 100.0
        for i, (name, dims, types, concrete, kname, dur) in enumerate(parts):
            corr += 1
            events.append(op(name, host, 20.0, base + i, dims, types, concrete))
            events += launched(kname, host, base + i, corr, gpu, dur)
            host += 25.0
            gpu += dur + 2.0
    return events


@pytest.fixture(scope="module")
def gnn(tmp_path_factory):
    doc = trace_doc(rank=0, world_size=1, events=gnn_steps(), deviceProperties=[H100])
    path = write_trace(tmp_path_factory.mktemp("gnn") / "rank0.json", doc)
    return analyze(load_run(path, cache=False))


def test_the_table_is_the_contract(gnn):
    roof = gnn.table("roofline")
    assert tuple(roof.columns) == ROOFLINE_COLUMNS
    assert set(roof["bound"]) <= set(BOUNDS)
    assert len(roof) == 4 and (roof["rank"] == 0).all()
    assert (roof["calls_per_step"] == 1.0).all()  # per step of the 2 used steps


def test_gather_scatter_are_memory_bound_the_gemm_math_bound(gnn):
    roof = gnn.table("roofline").set_index("op")
    sel = roof.loc["aten::index_select"]
    assert sel["bytes_per_step"] == pytest.approx(E * 8 + 2 * E * F * 4)
    assert sel["kernel_ms_per_step"] == pytest.approx(1.2)
    assert sel["achieved_gbps"] == pytest.approx(sel["bytes_per_step"] / 1.2e-3 / 1e9)
    assert sel["bound"] == "memory" and sel["flops_per_step"] == 0
    assert sel["peak_gbps"] == PEAK_GBPS and sel["peak_tflops"] == 66.9  # fp32 vector
    mm = roof.loc["aten::mm"]
    assert mm["flops_per_step"] == pytest.approx(2 * N * F * F)
    assert mm["bound"] == "math" and mm["peak_tflops"] == 66.9  # fp32 GEMM: no tensor cores
    assert mm["intensity_flop_per_byte"] == pytest.approx(
        2 * N * F * F / ((2 * N * F + F * F) * 4))
    assert roof.loc["aten::relu", "bound"] == "memory"


def test_memory_bound_finding_names_the_ops_and_a_better_implementation(gnn):
    f = next(f for f in gnn.findings if f.category == "memory_bound")
    assert f.rank == 0 and f.severity == "warning"
    assert f.evidence["fraction"] == pytest.approx((1200 + 720 + 40) / 3000, abs=1e-3)
    assert "aten::index_select" in f.message and "aten::scatter_add_" in f.message
    assert "better implementation" in f.recommendation
    assert "torch.compile" not in f.recommendation.split("Gather")[0]  # index work first
    # nothing consecutive to fuse: gather, scatter and relu are split by the GEMM
    assert f.estimated_saving is None


def test_memory_bound_work_gets_no_compute_advice(gnn):
    """The GNN of issue 20: 64% gather/scatter, GEMMs 7% of the step: no tensor-core warning,
    and neither the compute finding nor MFU advises intensity or tensor cores."""
    cats = [f.category for f in gnn.findings]
    assert "precision" not in cats
    for f in gnn.findings:
        if f.category in ("compute", "mfu"):
            assert "arithmetic intensity" not in f.recommendation
            assert "bf16/fp8 tensor cores" not in f.recommendation
    compute = next(f for f in gnn.findings if f.category == "compute")
    assert "memory-bound" in compute.message


def test_fp32_gemms_that_hold_the_step_keep_the_tensor_core_warning(tmp_path):
    """The same run with GEMMs 70% of the step: the precision warning, per step."""
    events = [e if e.get("cat") != "kernel" or "xmma" not in e["name"]
              else {**e, "dur": 2100.0} for e in gnn_steps()]
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=[H100])
    a = analyze(load_run(write_trace(tmp_path / "r.json", doc), cache=False))
    f = next(f for f in a.findings if f.category == "precision")
    assert f.evidence["fp32_gemm_ns_per_step"] == pytest.approx(2.1e6)
    assert "2.1 ms per step" in f.message


def test_roofline_goes_out_with_the_tables_the_json_and_the_text(gnn):
    files = table_files(gnn)
    header = files["roofline.csv"].decode().splitlines()[0]
    assert header == ",".join(ROOFLINE_COLUMNS)
    doc = to_json(gnn)
    assert [r["op"] for r in doc["roofline"]][:2] == ["aten::index_select", "aten::scatter_add_"]
    assert "Kernel roofline" in to_text(gnn)


def chain_calls(reads, writes, ns=100.0, bound="memory", family="elementwise", stream=7):
    import pandas as pd
    n = len(reads)
    return pd.DataFrame({"ts_ns": np.arange(n) * 1000, "dur_ns": [ns] * n, "stream": stream,
                         "step": 1, "op": [f"aten::op{i}" for i in range(n)],
                         "op_id": np.arange(n), "family": family, "bound": bound,
                         "read_bytes": reads, "write_bytes": writes})


def test_a_chain_fused_reads_its_inputs_once_and_writes_once():
    """x -> a -> b -> c, each 100 MB read and written, the second also reading x again:
    bytes 100+100 + 200+100 + 100+100 = 700 MB; fused: x (100) + x again as an external
    read (100: counted, the trace cannot tell it is x) + the result (100) = 300 MB. Time
    300 ns: saving 300 x (1 - 3/7)."""
    runs = fusion_runs(chain_calls([100e6, 200e6, 100e6], [100e6] * 3), n_steps=1)
    assert runs["runs"] == 1 and runs["kernels"] == 3
    assert (runs["bytes"], runs["min_bytes"]) == (700e6, 300e6)
    assert runs["saving_ns"] == pytest.approx(300 * (1 - 3 / 7))


def test_chains_break_at_other_work_streams_and_single_kernels():
    calls = chain_calls([1e6] * 3, [1e6] * 3)
    calls.loc[1, "bound"] = "math"  # a GEMM in between: two single kernels
    assert fusion_runs(calls, 1)["runs"] == 0
    calls = chain_calls([1e6] * 4, [1e6] * 4)
    calls.loc[[1, 3], "stream"] = 8  # interleaved streams: 7: 0, 2; 8: 1, 3
    assert fusion_runs(calls, 1)["runs"] == 2
    calls = chain_calls([1e6] * 3, [1e6] * 3, family="index")  # gathers do not fuse so
    assert fusion_runs(calls, 1)["runs"] == 0
    calls = chain_calls([1e6] * 3, [1e6] * 3)
    calls["op_id"] = 5  # one foreach op's chunks: one unit, nothing to fuse
    assert fusion_runs(calls, 1)["runs"] == 0


def test_a_custom_gemm_kernel_under_an_fp32_op_is_fp32(tmp_path):
    """A GEMM kernel whose name says no precision takes its op's input dtype: fp32, not the
    bf16 the peak table would default to; so it is judged against the fp32 peak and the
    GEMMs off the tensor cores are flagged."""
    events = [e if e.get("cat") != "kernel" or "xmma" not in e["name"]
              else {**e, "name": "my_custom_gemm_kernel", "dur": 2100.0} for e in gnn_steps()]
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=[H100])
    a = analyze(load_run(write_trace(tmp_path / "r.json", doc), cache=False))
    roof = a.table("roofline").set_index("op")
    assert roof.loc["aten::mm", "peak_tflops"] == 66.9 and roof.loc["aten::mm", "bound"] == "math"
    eff = a.table("efficiency").iloc[0]
    assert eff["fp32_gemm_ns"] == 2 * 2100 * 1000 and eff["tensor_core_gemm_frac"] == 0
    assert "precision" in [f.category for f in a.findings]


def test_shapes_recorded_without_matmuls_is_no_reason_to_record_shapes():
    """eltwise_chain (samples/runs/why) recorded shapes but runs no matmul: the MFU note
    says so instead of asking for record_shapes; the compute finding speaks of memory."""
    from tests.conftest import REPO

    a = analyze(load_run(REPO / "samples" / "runs" / "why" / "eltwise_chain", cache=False))
    note = next(f for f in a.findings if f.category == "mfu")
    assert "record_shapes" not in note.message + note.recommendation
    assert "no matmul" in note.message and "shapes are recorded" in note.message
    compute = next(f for f in a.findings if f.category == "compute")
    assert "memory-bound" in compute.message and "tensor cores" not in compute.recommendation.split(".")[0]


def test_compute_advice_changes_only_where_most_kernel_time_is_classified():
    """A CUDA-graph replay records few ops: its 3 ms of memory-bound kernels beside 96 ms
    without a cost say nothing about the rank (public vLLM replays); a rank 90% classified,
    60 of its 100 ms memory-bound, is a memory-bound rank."""
    import pandas as pd
    from profkit.analyzers.findings.roofline import memory_ranks

    rows = [(0, "memory", 3.0), (0, "math", 1.0), (0, "unknown", 96.0),
            (1, "memory", 60.0), (1, "math", 30.0), (1, "unknown", 10.0)]
    roof = pd.DataFrame(rows, columns=["rank", "bound", "kernel_ms_per_step"])
    assert memory_ranks(roof) == {1: pytest.approx(0.6)}


@pytest.mark.parametrize("families, conv_ns, fixes", [
    ({"elementwise": 80.0, "norm": 12.0, "index": 5.0, "copy": 3.0}, 0.0, ["fusion"]),
    ({"index": 60.0, "elementwise": 40.0}, 0.0, ["index", "fusion"]),
    ({"norm": 50.0, "elementwise": 45.0, "index": 5.0}, 7.0, ["fusion", "channels_last"]),
    ({"other": 10.0}, 0.0, ["fusion"]),
])
def test_a_fix_is_advised_for_the_families_that_hold_the_time(families, conv_ns, fixes):
    """A family with under 10% of the memory-bound time gets no paragraph of its own."""
    assert fix_list({"memory_families_ns": families, "conv_ns": conv_ns}) == fixes


def test_a_gpt_is_not_told_about_scatter_libraries_or_convolutions():
    """stock_ddp (the GPT sample): its memory-bound time is elementwise, norm and copies;
    the embedding backward's index kernels are a sliver of it."""
    from profkit.analyzers.executor import analyze_run

    from tests.conftest import REPO

    a = analyze_run(REPO / "samples" / "runs" / "stock_ddp", workers=1)
    advice = [f.recommendation for f in a.findings if f.category == "memory_bound"]
    assert advice and all("Fuse the chains" in r for r in advice)
    assert not any("torch_scatter" in r or "channels_last" in r for r in advice)


@pytest.mark.parametrize("seed", range(6))
def test_top_op_by_codes_is_the_grouping_by_text(seed):
    """Each kernel name's op with most time (ties: the op whose first call came last), as
    grouping the texts, sorting and dropping duplicates gives it, on random calls."""
    import pandas as pd
    from profkit.analyzers.measure.roofline import _top_op, _top_op_by_text, name_groups
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    names = np.array([f"k{i}" for i in range(7)], dtype=object)[rng.integers(0, 7, n)]
    ops = np.array(["", "aten::mm", "aten::add", "aten::mul"], dtype=object)[rng.integers(0, 4, n)]
    if seed == 0:
        ops[:] = ""
    calls = pd.DataFrame({"name": names, "op": ops, "dur_ns": rng.integers(0, 4, n) * 1000})
    want = _top_op_by_text(calls)
    for names in (calls["name"], calls["name"].astype("category")):  # as text, by codes
        got = _top_op(calls, *name_groups(names))
        assert got.index.tolist() == want.index.tolist()
        assert got.tolist() == want.tolist()
