"""Precision labels (issue 40, item 1): fp16, bf16 and fp32 kept apart, "unknown" without
evidence, and a device's capabilities respected (a V100 or T4 has no bf16).

samples/runs/issue40 (1 x H200, SUMMARY.txt there): the same fp32 MLP (TF32 off) three times,
as printed by the workload itself: ``precision_h200`` dtype "fp32" (43.58 ms), the twin
under fp16 autocast ``precision_fp16`` (dtype "fp16-autocast", 3.60 ms) and under bf16
autocast ``precision_bf16`` (3.66 ms). Each test reads the precision the ops really ran in
from the raw trace (the ``aten::mm`` ops' ``Input type``), not from profkit.
"""

from __future__ import annotations

import collections

import pytest
from profkit.analyzers.compare.diff import diff_analyses
from profkit.analyzers.measure.devices import DEVICES

from profkit.classify.flops import kernel_precision
from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc, sample_labels

RUNS = REPO / "samples" / "runs"
ISSUE = RUNS / "issue40"
DTYPE_OF_TYPE = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16"}


def mm_dtypes(run: str) -> collections.Counter:
    """The dtypes of the ``aten::mm`` ops in the run's trace, read from the raw JSON."""
    (trace,) = (ISSUE / run / "traces").glob("*.json*")
    out = collections.Counter()
    for e in read_doc(trace)["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm":
            out[DTYPE_OF_TYPE[e["args"]["Input type"][0]]] += 1
    return out


def efficiency(path) -> dict:
    return analysed(path).table("efficiency").iloc[0].to_dict()


@pytest.mark.parametrize("run, dtype", [("precision_fp16", "fp16"), ("precision_bf16", "bf16"),
                                        ("precision_h200", "fp32")])
def test_the_precision_mix_names_the_dtype_the_gemms_ran_in(run, dtype):
    printed = sample_labels(ISSUE / "SUMMARY.txt")[run]["dtype"]
    assert printed.startswith(dtype)  # what the workload says it ran
    assert set(mm_dtypes(run)) == {dtype}  # what the trace's ops say
    eff = efficiency(ISSUE / run)
    assert eff["precision_mix"] == f"{dtype}:1.00"
    # the peak MFU is judged against: the 16-bit one, named for what ran (fp32 could use bf16)
    assert eff["mfu_precision"] == ("fp16" if dtype == "fp16" else "bf16")
    assert eff["peak_tflops"] == pytest.approx(DEVICES["H200"].bf16_tflops)


def test_fp16_kernels_are_not_bf16_kernels():
    """cuBLASLt's nvjet names its types: hsh under the fp16 ops, tst under the bf16 ones."""
    for run, dtype in (("precision_fp16", "fp16"), ("precision_bf16", "bf16")):
        (trace,) = (ISSUE / run / "traces").glob("*.json*")
        names = {e["name"] for e in read_doc(trace)["traceEvents"]
                 if e.get("cat") == "kernel" and e["name"].startswith("nvjet")}
        assert names and {kernel_precision(n) for n in names} == {dtype}


def test_diff_of_an_fp16_amp_change_says_fp16_not_bf16():
    base, fp16, bf16 = (analysed(ISSUE / r) for r in ("precision_h200", "precision_fp16",
                                                       "precision_bf16"))
    assert diff_analyses(base, fp16).verdict["nature"] == ["GEMMs now fp16 (were fp32)"]
    assert diff_analyses(base, bf16).verdict["nature"] == ["GEMMs now bf16 (were fp32)"]
    assert diff_analyses(bf16, fp16).verdict["nature"] == ["GEMMs now fp16 (were bf16)"]


@pytest.mark.parametrize("run", ["zoo/cpu_launch", "why/eltwise_chain"])
def test_no_gemm_and_no_counted_flops_is_unknown_not_bf16(run):
    """Tiny elementwise kernels (cpu_launch) and an fp32 elementwise chain: no GEMM kernel
    names a precision and no op with a FLOP formula ran, so nothing says which precision."""
    (trace,) = list((RUNS / run / "traces").glob("*.json*"))
    kernels = [e["name"] for e in read_doc(trace)["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels and not any("gemm" in k.lower() or "nvjet" in k for k in kernels)
    assert efficiency(RUNS / run)["precision_mix"] == "unknown"


def test_a_v100_fp32_run_is_judged_against_fp16_it_has_no_bf16():
    """ResNet-50 in fp32 on a V100 (tests/data/public/resnet50_nw0): the fastest precision its
    GEMMs could use there is fp16 (the V100 datasheet's tensor cores: fp16 only)."""
    eff = efficiency(REPO / "tests" / "data" / "public" / "resnet50_nw0")
    assert eff["device_model"] == "V100 SXM2" and eff["precision_mix"] == "fp32:1.00"
    assert eff["mfu_precision"] == "fp16" and eff["peak_tflops"] == pytest.approx(125.0)


def test_devices_without_bf16():
    t4, h100 = DEVICES["T4"], DEVICES["H100 SXM"]
    assert t4.mfu_peak(["fp32"]) == ("fp16", 65.0) and t4.mfu_peak(["fp16"]) == ("fp16", 65.0)
    assert h100.mfu_peak(["fp32"]) == ("bf16", 989.4)
    assert h100.mfu_peak(["fp16", "fp32"]) == ("fp16", 989.4)
    assert t4.rate("fp16") == 65.0 and t4.rate("bf16") != t4.rate("bf16")  # NaN: no bf16
