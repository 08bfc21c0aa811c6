"""fp8 GEMMs, their quantisation overhead and the fp8 what-if, on a hand-built step whose
every number is worked out below, and on the H200 captures of an fp8 (torch._scaled_mm
e4m3) and a bf16 MLP of the same shapes (their printed TFLOP/s as labels)."""

import json

import numpy as np
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.devices import DEVICES

from profkit.classify.names import short_kernel_name
from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x

H100 = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132, "totalGlobalMem": 80 * 10**9}
SCALED = {"Input Dims": [[1024, 1024], [1024, 1024], [], []],
          "Input type": ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float"]}
NVJET_FP8 = "nvjet_sm90_qqtst_128x256_64x4_1x2_h_bz_coopA_NNT"
F = 2 * 1024**3


def fp8_step():
    """One step [0, 100) us on an H100. Before the first fp8 GEMM its input is quantised:
    abs 4 us, amax 2, mul 6, to -> _to_copy -> copy_ 6 (18 us). Then _scaled_mm (Float8 operands, fp32 scales) runs a
    30 us nvjet qq kernel; gelu 4 us (no quantisation), mul 4 us (quantisation of the second
    GEMM's input: nothing to fuse), a second 30 us fp8 GEMM. Quantisation 22 us per step,
    fp8 GEMMs 60 us, 2F FLOPs against the fp8 peak."""
    ops = [("aten::abs", 1, 1, "vectorized_elementwise_kernel<AbsFunctor>", 10, 4),
           ("aten::amax", 2, 1, "reduce_kernel<MaxOps>", 14, 2),
           ("aten::mul", 3, 1, "vectorized_elementwise_kernel<MulFunctor>", 16, 6)]
    events = [step(1, 0.0, 100.0)]
    for corr, (name, ts, dur, kname, kts, kdur) in enumerate(ops, start=1):
        events += [op(name, ts, dur, corr), launch(ts + 0.5, 0.1, corr),
                   gpu(kname, kts, kdur, corr)]
    events += [op("aten::to", 4.0, 2.0, 40), op("aten::_to_copy", 4.2, 1.6, 41),
               op("aten::copy_", 4.4, 1.2, 4), launch(5.0, 0.1, 4),
               gpu("direct_copy_kernel_cuda", 22.0, 6.0, 4),
               op("aten::_scaled_mm", 7.0, 2.0, 5, **SCALED), launch(8.0, 0.1, 5),
               gpu(NVJET_FP8, 28.0, 30.0, 5),
               op("aten::gelu", 10.0, 1.0, 6), launch(10.5, 0.1, 6),
               gpu("vectorized_elementwise_kernel<GeluCUDA>", 58.0, 4.0, 6),
               op("aten::mul", 11.0, 1.0, 7), launch(11.5, 0.1, 7),
               gpu("vectorized_elementwise_kernel<MulFunctor>", 62.0, 4.0, 7),
               op("aten::_scaled_mm", 13.0, 2.0, 8, **SCALED), launch(14.0, 0.1, 8),
               gpu(NVJET_FP8, 66.0, 30.0, 8)]
    return events


def op(name, ts, dur, ext, **args):
    """A CPU op whose kernels name it by External id ``ext``."""
    return x(name, "cpu_op", ts, dur, **{"External id": ext, **args})


def gpu(name, ts, dur, corr):
    """A kernel launched by correlation ``corr`` from the op of External id ``corr``."""
    return kernel(name, ts, dur, corr, **{"External id": corr})


def test_fp8_gemms_are_fp8_everywhere_and_their_quantisation_is_overhead(tmp_path):
    doc = trace_doc(rank=0, world_size=1, events=fp8_step(), deviceProperties=[H100])
    a = analyze(load_run(write_trace(tmp_path / "rank0.json", doc), cache=False))
    eff = a.table("efficiency").iloc[0]
    assert eff["mfu_precision"] == "fp8" and eff["peak_tflops"] == DEVICES["H100 SXM"].fp8_tflops
    assert eff["tensor_core_gemm_frac"] == 1.0 and eff["fp32_gemm_ns"] == 0
    assert eff["mfu"] == pytest.approx(2 * F / 100e-6 / 1e12 / 1978.9)
    roof = a.table("roofline")
    assert (roof.loc[roof["kernel"] == NVJET_FP8, "peak_tflops"] == 1978.9).all()
    assert "fp8" in short_kernel_name(NVJET_FP8)
    fp8 = a.table("fp8").iloc[0]
    assert fp8["fp8_gemm_ns"] == 60_000 and fp8["quant_ns"] == 22_000
    assert fp8["quant_kernels"] == 5  # gelu is no quantisation
    cats = [f.category for f in a.findings]
    assert "precision" not in cats
    quant = [f for f in a.findings if f.category == "fp8"]
    assert len(quant) == 1 and "quantisation overhead" in quant[0].message
    assert "0.022 ms per step (22% of the step" in quant[0].message
    assert not [f for f in a.findings if "autocast" in f.recommendation
                or ", bf16)" in f.recommendation]  # no "use bf16" to an fp8 step


def test_a_bf16_step_gets_an_fp8_whatif_and_an_fp8_one_does_not(tmp_path):
    """The same step with bf16 GEMMs (nvjet tst): 60 us of bf16 GEMMs, 60% of the step. In
    fp8 on an H100: 2F / (0.7 x 1978.9 TFLOP/s) = 1.550 us of math (their 4 MiB bf16 bytes
    x 0.5 at 0.8 x 3.35 TB/s = 0.78 us is less), plus the quantisation of their inputs, 4
    MiB read: eager 6.5 x 4 MiB / 2.68 TB/s = 10.17 us (the saving's), fused 2.5x: 3.91 us."""
    events = [dict(e, name="nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NNT")
              if e["name"] == NVJET_FP8 else e for e in fp8_step()]
    for e in events:
        if e["name"] == "aten::_scaled_mm":
            e["name"] = "aten::mm"
            e["args"] = {"Input Dims": [[1024, 1024], [1024, 1024]],
                         "Input type": ["c10::BFloat16"] * 2,
                         "External id": e["args"]["External id"]}
    doc = trace_doc(rank=0, world_size=1, events=events, deviceProperties=[H100])
    a = analyze(load_run(write_trace(tmp_path / "rank0.json", doc), cache=False))
    row = a.table("fp8").iloc[0]
    assert row["bf16_gemm_ns"] == 60_000 and row["quant_ns"] == 0
    math_ns = 2 * F / (0.7 * 1978.9e3)
    quant_ns = 6.5 * 2 * (2 * 1024**2) * 2 / (0.8 * 3.35e3)
    assert row["fp8_estimate_ns"] == pytest.approx(math_ns + quant_ns, rel=1e-6)
    assert row["fp8_fused_estimate_ns"] == pytest.approx(
        math_ns + quant_ns * 2.5 / 6.5, rel=1e-6)
    whatif = [f for f in a.findings if f.category == "fp8"]
    assert len(whatif) == 1 and "an estimate" in whatif[0].message
    assert whatif[0].estimated_saving["ms_per_step"] == pytest.approx(
        (60_000 - math_ns - quant_ns) / 1e6, abs=5e-4)
    assert np.isfinite(a.table("efficiency").iloc[0]["mfu"])


# --- H200 captures: the same MLP (8 GEMMs of 8192^3 per step) with torch._scaled_mm e4m3 and
# an eager per-tensor quantisation, or in bf16; FLOPs per step printed by the workload.
MEMORY = REPO / "samples" / "runs" / "memory"


def summary(name: str) -> dict:
    for line in (MEMORY / "SUMMARY.txt").read_text().splitlines():
        if " PROFKIT_SAMPLE " in line:
            fields = json.loads(line.split(" PROFKIT_SAMPLE ", 1)[1])
            if str(fields.get("out", "")).endswith("/" + name):
                return fields
    raise LookupError(name)


def test_h200_fp8_mlp_is_fp8_with_its_quantisation_and_no_bf16_advice():
    a = analyze(load_run(MEMORY / "fp8_gemm"))
    eff = a.table("efficiency").iloc[0]
    assert eff["mfu_precision"] == "fp8" and 0.3 < eff["mfu"] <= 1  # 42%: 826 of 1979
    assert eff["flops"] / eff["steps"] == pytest.approx(summary("fp8_gemm")["flops_per_step"])
    roof = a.table("roofline")
    gemm = roof[roof["op"] == "aten::_scaled_mm"]
    assert len(gemm) and (gemm["peak_tflops"] == 1978.9).all()
    assert (gemm["achieved_tflops"] / gemm["peak_tflops"]).between(0.5, 1.0).all()  # 76%
    assert "precision" not in [f.category for f in a.findings]
    assert not [f for f in a.findings if "autocast" in f.recommendation
                or ", bf16)" in f.recommendation]
    quant = [f for f in a.findings if f.category == "fp8"]
    assert len(quant) == 1 and "quantisation overhead" in quant[0].message
    row = a.table("fp8").iloc[0]
    assert row["quant_kernels"] == 6 * 8  # abs, max, div, cast (+ a copy, a mul) per GEMM
    assert 0.2 < row["quant_ns"] / row["step_ns"] < 0.5  # 3.88 of 10.6 ms


def test_h200_bf16_mlp_fp8_whatif_within_the_measured_fix():
    """The what-if on the bf16 run against the fp8 run, both profiled steps (2-4): measured
    1 - 10.60 / 12.19 = 13%; estimated 11% (eager quantisation)."""
    a = analyze(load_run(MEMORY / "bf16_gemm"))
    whatif = [f for f in a.findings if f.category == "fp8"]
    assert len(whatif) == 1 and "estimate" in whatif[0].message
    bf16, fp8 = (np.median(summary(n)["step_ms"][2:5]) for n in ("bf16_gemm", "fp8_gemm"))
    assert abs(whatif[0].estimated_saving["fraction"] - (1 - fp8 / bf16)) <= 0.15
