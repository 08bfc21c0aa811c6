"""MFU, utilisation, SM efficiency, occupancy and NVML joins on a hand-built run whose every
number is worked out below, on the runs captured on 2x H200 (samples/runs) and the corpus."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.findings.judge import judged
from profkit.analyzers.measure.devices import DEVICES, match_device
from profkit.analyzers.measure.efficiency import TABLES, analyze_efficiency
from profkit.analyzers.thresholds import Thresholds

from profkit import schema as S
from profkit.model import Run
from profkit.run.loader import load_run
from tests.analysed import loaded
from tests.conftest import CORPUS, REPO
from tests.factories import BASE_NS, kernel, launch, step, trace_doc, write_trace, x

US = 1000
RUNS = REPO / "samples" / "runs"
CORPUS_FILES = sorted(CORPUS.rglob("*.json.gz")) if CORPUS.is_dir() else []
H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 80 * 10**9}


def timeline(gemm="sm90_xmma_gemm_bf16bf16_bf16f32"):
    """One step [0, 100) us on device 0.

    GEMM kernel 10-50 (blocks per SM 0.5, occupancy 40%), elementwise kernel on stream 8
    30-70 (blocks per SM 2, occupancy 80%): busy [10, 70) = 60 us; SM efficiency
    (20 x 0.5 + 20 x min(2.5, 1) + 20 x min(2, 1)) / 100 = 0.5; occupancy
    (40 x 40 + 80 x 40) / 80 = 60%. FLOPs: aten::conv2d [5, 25) 1e9 holds aten::convolution
    [6, 16) 1e9 (nested: not counted again) and aten::mm [30, 35) 3e9: 4e9 FLOP in 100 us =
    40 TFLOP/s, MFU 40 / 989.4 on an H100 SXM.
    """
    return [
        step(1, 0.0, 100.0),
        x("aten::conv2d", "cpu_op", 5.0, 20.0, flops=1e9),
        x("aten::convolution", "cpu_op", 6.0, 10.0, flops=1e9),
        launch(8.0, 1.0, 1),
        kernel(gemm, 10.0, 40.0, 1, **{"blocks per SM": 0.5, "est. achieved occupancy %": 40}),
        launch(28.0, 1.0, 2),
        kernel("vectorized_elementwise_kernel", 30.0, 40.0, 2, stream=8,
               **{"blocks per SM": 2.0, "est. achieved occupancy %": 80}),
        x("aten::mm", "cpu_op", 30.0, 5.0, flops=3e9),
    ]


def load(tmp_path, events, devices=(H100,)) -> Run:
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=list(devices))
    return load_run(write_trace(tmp_path / "rank0.json", doc), cache=False)


def counters(rows):
    """(us after BASE_NS, metric, value) -> the long counters table on device 0."""
    return pd.DataFrame({S.TS_NS: [BASE_NS + int(t * US) for t, _, _ in rows],
                         S.DEVICE: 0, S.METRIC: [m for _, m, _ in rows],
                         S.VALUE: [float(v) for _, _, v in rows]})


def with_counters(run: Run, table: pd.DataFrame) -> Run:
    return replace(run, ranks={0: replace(run.ranks[0], counters=table)})


def test_utilisation_sm_efficiency_occupancy_and_mfu(tmp_path):
    res = judged(analyze_efficiency(load(tmp_path, timeline())))
    row = res.tables["efficiency"].iloc[0]
    assert row["device_model"] == "H100 SXM" and row["step_time_ns"] == 100 * US
    assert row["gpu_util"] == pytest.approx(0.6)
    assert row["sm_efficiency"] == pytest.approx(0.5)
    assert row["occupancy_pct"] == pytest.approx(60.0)
    assert row["flops"] == 4e9 and row["flops_source"] == "trace"
    assert row["achieved_tflops"] == pytest.approx(40.0)
    assert row["mfu"] == pytest.approx(40.0 / 989.4)
    assert row["tensor_core_gemm_frac"] == 1.0
    assert [f.category for f in res.findings] == ["mfu"]  # 4% < 20%; busy 60% is fine
    assert res.findings[0].severity == "warning"


def test_model_formula_replaces_trace_flops(tmp_path):
    res = judged(analyze_efficiency(load(tmp_path, timeline()), flops_per_step=50e9))
    row = res.tables["efficiency"].iloc[0]
    assert row["flops_source"] == "model formula"
    assert row["achieved_tflops"] == pytest.approx(500.0)  # 50e9 FLOP in 100 us
    fp32 = judged(analyze_efficiency(load(tmp_path, timeline()), peak_dtype="fp32"))
    assert fp32.tables["efficiency"].iloc[0]["peak_tflops"] == DEVICES["H100 SXM"].fp32_tflops


def test_fp32_gemms_without_tensor_cores(tmp_path):
    res = judged(analyze_efficiency(load(tmp_path, timeline(gemm="volta_sgemm_128x64_nn"))))
    row = res.tables["efficiency"].iloc[0]
    assert row["tensor_core_gemm_frac"] == 0.0 and row["fp32_gemm_ns"] == 40 * US
    assert "precision" in [f.category for f in res.findings]


def test_nvml_joins(tmp_path):
    """Window [0, 100] us plus one sampling interval (median spacing of that metric).

    sm_clock at -50 (before), 20, 70, 300: spacing 70, 50, 230 -> median 70, window to 170:
    1500 and 1700 -> mean 1600, min 1500. Throttle reasons 0x1 (idle: ignored) at 20 and
    0x44 (SW power cap + HW thermal) at 70. Energy 1000 mJ at -100 and 1030 at 200: 0.1 mJ/us,
    1010 at 0 and 1020 at 100: 10 mJ = 0.01 J for the one step. 76 of 80 GB used: 95%.
    """
    table = counters([(-50, "sm_clock_mhz", 1000), (20, "sm_clock_mhz", 1500),
                      (70, "sm_clock_mhz", 1700), (300, "sm_clock_mhz", 1900),
                      (20, "clocks_event_reasons", 0x1), (70, "clocks_event_reasons", 0x44),
                      (-100, "energy_mj", 1000), (200, "energy_mj", 1030),
                      (50, "power_w", 200), (50, "mem_used_bytes", 76e9),
                      (50, "gpm_tensor_active_pct", 30)])
    res = judged(analyze_efficiency(with_counters(load(tmp_path, timeline()), table)))
    row = res.tables["nvml"].iloc[0]
    assert row["sm_clock_mean_mhz"] == 1600 and row["sm_clock_min_mhz"] == 1500
    assert row["clock_samples"] == 2
    assert row["throttle_samples"] == 1 and row["throttle_reasons"] == "sw_power_cap,hw_thermal"
    assert row["energy_j_per_step"] == pytest.approx(0.01) and row["energy_source"] == "energy_mj"
    assert row["power_mean_w"] == 200 and row["gpm_tensor_active_pct"] == 30
    assert row["matmul_time_frac"] == pytest.approx(0.4)  # the 40 us GEMM in 100 us
    assert row["peak_mem_frac"] == pytest.approx(0.95)
    cats = [f.category for f in res.findings]
    assert "throttling" in cats and "memory" in cats


def test_energy_falls_back_to_power(tmp_path):
    table = counters([(50, "energy_mj", 1000), (50, "power_w", 300)])
    res = judged(analyze_efficiency(with_counters(load(tmp_path, timeline()), table)))
    row = res.tables["nvml"].iloc[0]
    assert row["energy_source"] == "power_w"
    assert row["energy_j_per_step"] == pytest.approx(300 * 100e-6)  # 300 W x 100 us


@pytest.mark.parametrize("name, sms, mem, key", [
    ("NVIDIA H200", 132, 150e9, "H200"),
    ("NVIDIA H100 80GB HBM3", 132, 85e9, "H100 SXM"),
    ("NVIDIA H100 PCIe", 114, 85e9, "H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", 108, 85e9, "A100 80GB SXM"),
    ("NVIDIA A100-PG509-200", 108, 42.5e9, "A100 40GB"),
    ("Tesla V100-SXM2-32GB", 80, 34e9, "V100 SXM2"),
    ("NVIDIA B200", 148, 191e9, "B200"),
    ("NVIDIA L40S", 142, 48e9, "L40S"),
    ("NVIDIA L4", 58, 24e9, "L4"),
    ("AMD Instinct MI300X", 304, 206e9, "MI300X"),
    ("AMD Radeon Graphics", 104, 68.7e9, "MI250 GCD"),  # the corpus MI250 trace
    ("", 304, 206e9, "MI300X"),
    ("NVIDIA GH200 480GB", 132, 102e9, "GH200"),  # once read as an H200
    ("NVIDIA GH200 144G HBM3e", 132, 151e9, "GH200 144GB"),
    ("Tesla T4", 40, 15.8e9, "T4"),  # once unknown
    ("NVIDIA A10G", 80, 23.8e9, "A10G"),
    ("NVIDIA A10", 72, 23.8e9, "A10"),
    ("NVIDIA H100 NVL", 132, 100e9, "H100 NVL"),
    ("AMD Instinct MI210", 104, 68.7e9, "MI210"),
    ("AMD Instinct MI325X", 304, 274e9, "MI325X"),
    ("AMD Instinct MI355X", 256, 309e9, "MI355X"),
])
def test_device_names(name, sms, mem, key):
    assert match_device(name, sms, mem).key == key


def test_unknown_device():
    assert match_device("Some GPU", 7, 1e9) is None


def test_every_device_has_a_peak_for_each_kind_of_work():
    """Every table row has a 16-bit and an fp32 peak and a memory bandwidth (roofline,
    MFU and link checks need them), each a positive number."""
    for d in DEVICES.values():
        assert d.bf16_tflops > 0 and d.fp32_tflops > 0 and d.mem_bw_tbps > 0 and d.mem_gb > 0, d


def test_an_unknown_device_is_named_unknown_in_the_report():
    from profkit.analyzers.report.sections import device_label

    assert device_label("", "Some GPU") == "unknown (Some GPU)"
    assert device_label(None, None) == "unknown"
    assert device_label("H200", "NVIDIA H200") == "H200"


def test_compute_run_mfu_and_utilisation():
    """zoo/compute: 12 GEMMs 8192^3 per step, 3 x 2 x 8192^3 x 4 layers = 13.194 TFLOP; the
    script timed 747.1 TFLOP/s from its median step with CUDA events (samples/runs/SUMMARY)."""
    summary = next(json.loads(line.split(" ", 2)[2]) for line in
                   (RUNS / "SUMMARY.txt").read_text().splitlines() if line.startswith("zoo_compute"))
    run = load_run(RUNS / "zoo" / "compute")
    plain = judged(analyze_efficiency(run))
    row = plain.tables["efficiency"].iloc[0]
    assert row["gpu_util"] > 0.9 and row["device_model"] == "H200"
    # FLOPs from the ops' input shapes (profkit.classify.flops): 11 GEMMs per step, not the script's
    # 12: 4 forward + 4 weight gradients + 3 input gradients (layer 1's input needs none).
    assert row["flops"] / 3 == pytest.approx(11 * 2 * 8192**3)
    assert row["achieved_tflops"] == pytest.approx(summary["achieved_tflops"] * 11 / 12, rel=0.05)
    assert 0.6 < row["mfu"] < 0.85
    row = judged(analyze_efficiency(run, flops_per_step=summary["matmul_tflop_per_step"] * 1e12))
    row = row.tables["efficiency"].iloc[0]
    assert row["achieved_tflops"] == pytest.approx(summary["achieved_tflops"], rel=0.05)
    assert 0.6 < row["mfu"] < 0.85  # cuBLAS bf16 on a 989 TFLOP/s part


def test_ddp_run_nvml_joins():
    res = judged(analyze_efficiency(load_run(RUNS / "profkit_ddp")))
    nvml = res.tables["nvml"]
    assert list(nvml["rank"]) == [0, 1]
    assert ((nvml["sm_clock_mean_mhz"] > 1900) & (nvml["sm_clock_mean_mhz"] <= 1980)).all()
    assert (nvml["energy_j_per_step"] > 0).all()
    assert (nvml["throttle_samples"] == 0).all()
    assert (res.tables["efficiency"]["gpu_util"] > 0.9).all()


def test_cpu_launch_run_has_low_utilisation_but_no_batch_size_advice():
    """Low GPU utilisation is the complement of the idle parts, which have findings of their
    own with the right advice; a blanket "increase the batch size" makes a data-loading or
    host-sync bound job worse, so it is no finding."""
    res = judged(analyze_efficiency(load_run(RUNS / "zoo" / "cpu_launch")))
    assert res.tables["efficiency"].iloc[0]["gpu_util"] < 0.2
    assert not [f for f in res.findings if "batch size" in f.recommendation]


@pytest.mark.skipif(not CORPUS_FILES, reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_traces(path):
    run = loaded(path)
    res = judged(analyze_efficiency(run))
    assert set(res.tables) == {name for name, _ in TABLES}
    if any(rd.has_gpu for rd in run.ranks.values()):
        eff = res.tables["efficiency"]
        assert len(eff) == len(run.ranks) and (eff["gpu_util"].between(0, 1.0001)).all()
    else:
        assert all(t.empty for t in res.tables.values())
        assert [(f.category, f.severity) for f in res.findings] == [("coverage", "info")]


# --- FLOP coverage, precision-aware peaks, options ------------------------------------------
MM_DIMS = {"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["c10::BFloat16"] * 2}
MM_FLOPS = 2 * 1024**3  # 2MNK


def mm_step(*gemms, uncovered=None):
    """One step [0, 100) us; per GEMM kernel name an aten::mm of MM_FLOPS on the CPU at
    [10k, 10k + 8) launching it at 10k + 2, the kernel at [20k + 20, 20k + 35). ``uncovered``:
    one more GEMM kernel, 40 us, launched outside any op."""
    events = [step(1, 0.0, 100.0)]
    for i, name in enumerate(gemms):
        events += [x("aten::mm", "cpu_op", 10.0 * i, 8.0, **MM_DIMS),
                   launch(10.0 * i + 2, 1.0, i + 1),
                   kernel(name, 20.0 * i + 20, 15.0, i + 1)]
    if uncovered:
        events += [launch(90.0, 1.0, 99), kernel(uncovered, 50.0, 40.0, 99)]
    return events


def test_mfu_against_one_stated_peak_and_the_blend_under_its_own_name(tmp_path):
    """H100 SXM dense peaks: bf16 989.4, fp8 1978.9 TFLOP/s. One bf16 and one fp8 GEMM of F
    each in 100 us: 2F / 100 us = 42.95 TFLOP/s. MFU (PaLM): against the fastest precision
    the step's GEMMs use, fp8's 1978.9; the blend 2F / (F/989.4 + F/1978.9) = 1319.2 TFLOP/s
    only as the FLOP-weighted peak utilisation. No recompute: HFU = MFU."""
    res = judged(analyze_efficiency(load(tmp_path, mm_step("sm90_xmma_gemm_bf16bf16_bf16f32_f32",
                                                    "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32"))))
    row = res.tables["efficiency"].iloc[0]
    achieved = 2 * MM_FLOPS / 100e-6 / 1e12
    blend = 2 / (1 / 989.4 + 1 / 1978.9)
    assert row["achieved_tflops"] == pytest.approx(achieved)
    assert row["peak_tflops"] == pytest.approx(1978.9) and row["mfu_precision"] == "fp8"
    assert row["mfu"] == pytest.approx(achieved / 1978.9) and row["hfu"] == row["mfu"]
    assert row["flop_weighted_peak_tflops"] == pytest.approx(blend)
    assert row["flop_weighted_util"] == pytest.approx(achieved / blend)
    assert row["precision_mix"] == "bf16:0.50,fp8:0.50" and row["flop_coverage"] == 1.0


def test_fp32_gemms_are_judged_against_the_16_bit_peak(tmp_path):
    """An fp32 SIMT GEMM could run in bf16 (autocast): MFU against the bf16 peak (989.4 on
    an H100 SXM), not the fp32 one (66.9) nor a blend of the two."""
    row = judged(analyze_efficiency(load(tmp_path, mm_step("ampere_sgemm_128x64_nn")))
                 ).tables["efficiency"].iloc[0]
    assert row["mfu_precision"] == "bf16" and row["peak_tflops"] == pytest.approx(989.4)
    assert row["mfu"] == pytest.approx(MM_FLOPS / 100e-6 / 1e12 / 989.4)
    assert row["flop_weighted_peak_tflops"] == pytest.approx(66.9)


def test_mfu_above_100_percent_says_why_and_never_that_the_device_is_unknown(tmp_path):
    """2 x 1024^3 FLOPs in 1 us is 2147 TFLOP/s: above the H100's bf16 peak and even its
    fp8 one (1978.9), so FLOPs are counted twice or times cut; and a known device is never
    'not in the peak table'."""
    events = [step(1, 0.0, 1.0), x("aten::mm", "cpu_op", 0.0, 0.5, **MM_DIMS),
              launch(0.1, 0.1, 1), kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32", 0.2, 0.7, 1)]
    res = judged(analyze_efficiency(load(tmp_path, events)))
    row = res.tables["efficiency"].iloc[0]
    assert np.isnan(row["mfu"]) and np.isnan(row["hfu"]) and "counted twice" in row["mfu_why"]
    notes = [f.message for f in res.findings if f.category == "mfu"]
    assert len(notes) == 1 and "would exceed 100%" in notes[0], notes
    assert not [m for m in notes if "peak table" in m]


def test_block_scaled_fp4_gemms_are_tensor_core_not_fp32(tmp_path):
    """bmm_MxE4m3_MxE2m1..._Fp32 accumulates in fp32 but multiplies fp8 x fp4 on tensor
    cores: judged against the fp8 peak, and no "no tensor cores" finding."""
    res = judged(analyze_efficiency(load(tmp_path, mm_step("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16"))))
    row = res.tables["efficiency"].iloc[0]
    assert row["tensor_core_gemm_frac"] == 1.0 and row["fp32_gemm_ns"] == 0
    assert row["peak_tflops"] == pytest.approx(DEVICES["H100 SXM"].fp8_tflops)
    assert "precision" not in [f.category for f in res.findings]


def test_low_flop_coverage_is_not_judged(tmp_path):
    """The covered GEMM runs 15 us, a GEMM no op with a formula launched runs 40 us: coverage
    15 / 55 = 27% < 50%, so no MFU and no "MFU is 0%" warning, an info finding instead."""
    events = mm_step("sm90_xmma_gemm_bf16bf16_bf16f32_f32", uncovered="custom_gemm_kernel")
    res = judged(analyze_efficiency(load(tmp_path, events)))
    row = res.tables["efficiency"].iloc[0]
    assert row["flop_coverage"] == pytest.approx(15 / 55)
    assert np.isnan(row["mfu"]) and row["achieved_tflops"] > 0
    notes = [f for f in res.findings if f.category == "mfu"]
    assert [f.severity for f in notes] == ["info"] and "not judged" in notes[0].message
    # the model's FLOPs per step make it judgeable; --peak-tflops replaces the table's peak
    opts = judged(analyze_efficiency(load(tmp_path, events), Thresholds(flops_per_step=5e9,
                                                                 peak_tflops=100.0)))
    row = opts.tables["efficiency"].iloc[0]
    assert row["flops_source"] == "model formula" and row["peak_tflops"] == 100.0
    assert row["mfu"] == pytest.approx(5e9 / 100e-6 / 1e12 / 100.0)  # 50 of 100 TFLOP/s


def test_analyze_takes_flops_per_step_and_peak_through_thresholds(tmp_path):
    from profkit.analyzers.analyze import analyze

    run = load(tmp_path, mm_step("sm90_xmma_gemm_bf16bf16_bf16f32_f32"))
    eff = analyze(run, Thresholds(flops_per_step=1e9, peak_tflops=20.0)).table("efficiency")
    assert eff.iloc[0]["mfu"] == pytest.approx(1e9 / 100e-6 / 1e12 / 20.0)


@pytest.mark.skipif(not CORPUS_FILES, reason=f"corpus not found at {CORPUS}")
def test_corpus_b200_block_scaled_gemms_and_vllm_graph_replay():
    """B200 eager trace (vLLM, MXFP4 MoE): its block-scaled bmm kernels were counted as fp32
    SIMT GEMMs. vLLM decode replayed from CUDA graphs: no kernel links back to an op, so
    MFU is not judged (it read 0% before)."""
    b200 = judged(analyze_efficiency(load_run(CORPUS / "tracelens" / "b200" / "eager_trace.json.gz",
                                       cache=False))).tables["efficiency"].iloc[0]
    assert b200["fp32_gemm_ns"] == 0 and b200["tensor_core_gemm_frac"] == 1.0
    vllm = next((CORPUS / "tracelens" / "inference").rglob("*.json.gz"))
    res = judged(analyze_efficiency(loaded(vllm)))
    assert np.isnan(res.tables["efficiency"].iloc[0]["mfu"])
    assert not [f for f in res.findings if f.category == "mfu" and f.severity == "warning"]


def test_an_op_whose_product_never_ran_counts_no_flops(tmp_path):
    """Two aten::mm of MM_FLOPS each: the first launches its GEMM (15 us), the second only a
    cast (an elementwise kernel, 5 us: a recompute stopped before its GEMM). Only the first
    op's FLOPs count: MM_FLOPS in the 100 us step."""
    events = [step(1, 0.0, 100.0),
              x("aten::mm", "cpu_op", 0.0, 8.0, **MM_DIMS), launch(2.0, 1.0, 1),
              kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32", 20.0, 15.0, 1),
              x("aten::mm", "cpu_op", 10.0, 8.0, **MM_DIMS), launch(12.0, 1.0, 2),
              kernel("vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>", 40.0, 5.0, 2)]
    row = judged(analyze_efficiency(load(tmp_path, events))).tables["efficiency"].iloc[0]
    assert row["trace_flops"] == MM_FLOPS


@pytest.mark.parametrize("name, key", [("NVIDIA H20", "H20"), ("NVIDIA H200", "H200"),
                                       ("NVIDIA GH200 480GB", "GH200")])
def test_h20_is_no_h200(name, key):
    assert match_device(name).key == key


def test_peaks_are_dense_and_consistent():
    """REFERENCE.md: H100 SXM bf16 ~989 dense TFLOP/s, the H200 the same compute. Hopper's
    fp8 and int8 run at twice its 16-bit rate, TF32 at half; the A100 has no fp8."""
    h100, h200 = DEVICES["H100 SXM"], DEVICES["H200"]
    assert h100.bf16_tflops == pytest.approx(989.4) and h200.bf16_tflops == h100.bf16_tflops
    for d in (h100, h200, DEVICES["H100 PCIe"], DEVICES["H20"], DEVICES["B200"]):
        assert d.fp8_tflops == pytest.approx(2 * d.bf16_tflops, rel=0.01)
        assert d.int8_tops == d.fp8_tflops and d.tf32_tflops == pytest.approx(d.bf16_tflops / 2, rel=0.01)
    assert np.isnan(DEVICES["A100 80GB SXM"].fp8_tflops)
    assert DEVICES["A100 80GB SXM"].mfu_peak(["fp8"]) == ("bf16", 312.0)  # no fp8 to judge
    assert DEVICES["MI300X"].mfu_peak(["bf16", "fp8"]) == ("fp8", 2614.9)
    assert h200.fastest_tflops == h200.int8_tops
