"""Nsight Compute's counters in the analysis: which kernels profkit ncu measures, the
ncu_kernels table joining them to top_kernels (and to a roofline table when one exists),
the findings, and the report's section and JSON. Hand-built frames with numbers taken from
the H100 captures in samples/runs/why/ncu."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.findings.consolidate import fold_measured
from profkit.analyzers.findings.ncu import ncu_findings
from profkit.analyzers.measure.ncu import (
    join_counters,
    measured_bound,
    rank_steps,
    select_kernels,
)
from profkit.analyzers.report.render import to_json, to_text
from profkit.analyzers.result import Finding
from profkit.analyzers.thresholds import DEFAULT

from profkit.trace.ncu import COLUMNS

ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
ADD_NCU = ("void vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, std::array<char *, 3>>"
           "(int, T2, T3)")
GEMM = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_execute_kernel__5x_cublas"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SLOW = "void at::native::index_elementwise_kernel<128, 4>(int)"


def top_kernels() -> pd.DataFrame:
    rows = [(NCCL, "communication", 6, 9e6), (GEMM, "compute", 9, 48.7e6),
            (ADD, "compute", 9, 2.39e6), (SLOW, "compute", 3, 2.2e6)]
    k = pd.DataFrame(rows, columns=["name", "cls", "count", "total_ns"])
    k["subcls"] = ""
    k["mean_ns"] = k["total_ns"] / k["count"]
    k["share"] = k["total_ns"] / k["total_ns"].sum()
    return k.sort_values("total_ns", ascending=False, ignore_index=True)


def launch(kernel: str, **metrics) -> dict:
    row = {c: math.nan for c in COLUMNS}
    row.update(kernel=kernel, function="", trace_kernel="", **metrics)
    return row


def counters() -> pd.DataFrame:
    add = dict(duration_ns=259_500, dram_read_bytes=536.9e6, dram_write_bytes=251.4e6,
               dram_pct=90.6, mem_pct=91.0, sm_pct=3.9, tensor_pct=0.0, fma_pct=1.9,
               occupancy_pct=83.0, l2_hit_pct=35.0, stall_long_scoreboard=274.0,
               stall_not_selected=1.2)
    gemm = dict(duration_ns=5_414_000, dram_read_bytes=1157e6, dram_write_bytes=124e6,
                dram_pct=7.1, mem_pct=30.0, sm_pct=86.5, tensor_pct=0.0, fma_pct=78.7)
    slow = dict(duration_ns=400_000, dram_read_bytes=100e6, dram_write_bytes=20e6,
                dram_pct=12.0, mem_pct=75.0, sm_pct=20.0, tensor_pct=0.0, fma_pct=3.0,
                l2_hit_pct=20.0, stall_lg_throttle=40.0)
    rows = [launch(ADD_NCU, **add) for _ in range(3)] + [launch(GEMM, **gemm) for _ in range(2)]
    rows += [launch("void at::native::index_elementwise_kernel<128, 4>(int)", **slow),
             launch("void some_kernel_the_trace_never_saw<1>(int)", duration_ns=1000)]
    rows[1]["dram_pct"] = 88.0  # medians over launches
    return pd.DataFrame(rows)


def test_select_kernels_by_time_or_name_never_collectives():
    top = top_kernels()
    picked = select_kernels(top, steps=3, max_kernels=2)
    assert [k["name"] for k in picked] == [GEMM, ADD]
    assert picked[0]["calls_per_step"] == 3 and picked[1]["share"] == pytest.approx(0.039, 0.05)
    assert [k["name"] for k in select_kernels(top, 3, 5, ["elementwise"])] == [ADD, SLOW]
    assert [k["name"] for k in select_kernels(top, 3, 5, ["^elementwise\\(add"])] == [ADD]
    assert select_kernels(top, 3, 5, ["AllReduce"]) == []
    assert select_kernels(pd.DataFrame(), 3, 5) == []
    assert rank_steps(pd.DataFrame({"steps": [3, 0]})) == 4 and rank_steps(None) == 1


def test_join_names_the_trace_kernels_with_medians():
    res = join_counters(top_kernels(), counters())
    k = res.tables["ncu_kernels"].set_index("kernel")
    assert list(k.index) == [GEMM, ADD, SLOW]  # top_kernels order; NCCL never measured
    add = k.loc[ADD]
    assert add["ncu_kernel"] == ADD_NCU and add["launches"] == 3
    assert add["dram_pct"] == 90.6 and add["dram_bytes"] == pytest.approx(788.3e6)
    assert add["dram_gbps"] == pytest.approx(788.3e6 / 259_500)
    assert add["measured_bound"] == "memory" and add["short_name"].startswith("elementwise(add")
    assert add["top_stalls"] == "long_scoreboard 274, not_selected 1.2"
    assert k.loc[GEMM, "measured_bound"] == "math" and k.loc[GEMM, "top_rank"] == 1
    assert k.loc[SLOW, "measured_bound"] == "memory"  # L1/L2 busy, DRAM not
    assert res.facts["launches"] == 7
    assert res.facts["unmatched"] == ["void some_kernel_the_trace_never_saw<1>(int)"]
    assert math.isnan(add["est_bytes"])  # no roofline table


def test_the_captures_own_match_is_kept_when_names_no_longer_match():
    c = counters()
    c.loc[5, "kernel"], c.loc[5, "trace_kernel"] = "renamed_by_a_new_demangler", SLOW
    assert SLOW in set(join_counters(top_kernels(), c).tables["ncu_kernels"]["kernel"])


def test_roofline_estimates_sit_beside_the_measurement():
    roofline = pd.DataFrame({"kernel": [ADD, GEMM], "calls_per_step": [3.0, 3.0],
                             "bytes_per_step": [3 * 805e6, 3 * 201e6],
                             "bound": ["memory", "math"]})
    k = join_counters(top_kernels(), counters(), roofline).tables["ncu_kernels"].set_index("kernel")
    assert k.loc[ADD, "est_bytes"] == pytest.approx(805e6)
    assert k.loc[ADD, "bytes_ratio"] == pytest.approx(788.3 / 805, 1e-3)
    assert k.loc[GEMM, "bytes_ratio"] == pytest.approx(1281 / 201, 1e-3)
    assert k.loc[ADD, "est_bound"] == "memory" and pd.isna(k.loc[SLOW, "est_bound"])
    findings = {f.category: f for f in ncu_findings(
        join_counters(top_kernels(), counters(), roofline), DEFAULT)}
    assert set(findings) == {"hbm_roof", "memory_access", "tensor_cores", "estimate_mismatch"}
    mismatch = findings["estimate_mismatch"]
    assert mismatch.evidence["count"] == 1 and "6.4x" in mismatch.message


def test_findings_name_their_kernels():
    f = {x.category: x for x in ncu_findings(join_counters(top_kernels(), counters()), DEFAULT)}
    assert set(f) == {"hbm_roof", "memory_access", "tensor_cores"}
    assert "91% of DRAM peak" in f["hbm_roof"].message and "fuse" in f["hbm_roof"].recommendation
    assert f["memory_access"].evidence["first_top_stalls"] == "lg_throttle 40"
    assert f["tensor_cores"].severity == "warning"  # the GEMM is 80% of kernel time
    assert f["tensor_cores"].evidence["first_fma_pct"] == 78.7


def test_measured_bound():
    assert measured_bound(90, 91, 4, 0, 2) == "memory"
    assert measured_bound(7, 30, 86, 0, 79) == "math"
    assert measured_bound(40, 45, 43, 2, 8) == "latency"  # nothing near its roof
    assert measured_bound(math.nan, math.nan, math.nan, math.nan, math.nan) == "unknown"


def test_no_counters_no_table_and_no_findings():
    res = join_counters(top_kernels(), pd.DataFrame())
    assert "ncu_kernels" not in res.tables and ncu_findings(res, DEFAULT) == []


def test_tensor_core_counters_become_the_precision_findings_evidence():
    precision = Finding(category="precision", severity="warning", message="No GEMM runs on "
                        "tensor cores.", recommendation="bf16", rank=0)
    measured = Finding(category="tensor_cores", severity="warning", message="m",
                       recommendation="r", evidence={"first_short_name": "xmma gemm fp32",
                                                     "first_fma_pct": 78.7,
                                                     "first_tensor_pct": 0.0})
    (folded,) = fold_measured([precision, measured])
    assert folded.category == "precision" and folded.evidence["ncu"]["first_fma_pct"] == 78.7
    assert "FP32 FMA pipe 79% busy and the tensor pipe 0%" in folded.message
    assert fold_measured([measured]) == [measured]  # alone, it stands


def test_report_section_and_json():
    tables = {"ncu_kernels": join_counters(top_kernels(), counters()).tables["ncu_kernels"],
              "rank_breakdown": pd.DataFrame()}
    a = Analysis({"path": "run", "ranks_analyzed": [0]}, {"summary": "s", "primary": None},
                 tables)
    text = to_text(a)
    assert "Nsight Compute counters (6 launches of 3 kernel(s), profkit ncu)" in text
    assert "memory/-" in text and "long_scoreboard 274" in text
    rows = to_json(a)["ncu_kernels"]
    assert [r["kernel"] for r in rows] == [GEMM, ADD, SLOW] and rows[1]["dram_pct"] == 90.6
    assert "ncu_kernels" not in to_json(Analysis({"path": "run"}, {"summary": "s"}, {}))


REAL = Path(__file__).resolve().parents[2] / "samples" / "runs" / "why"


@pytest.mark.parametrize("run, measured", [("eltwise_chain", "eltwise_chain"),
                                           ("precision", "precision_fp32"),
                                           ("precision_fixed", "precision_bf16")])
def test_real_runs_with_the_counters_profkit_ncu_measured_on_an_h100(tmp_path, run, measured):
    """samples/runs/why/ncu/profkit_ncu: what profkit ncu stored for the why workloads on an
    H100 (test_ncu_gpu.py's run), joined to the traces they were measured against."""
    from profkit.analyzers.executor import analyze_run

    copy = tmp_path / run
    shutil.copytree(REAL / run, copy, ignore=shutil.ignore_patterns(".profkit"))
    (copy / "ncu").mkdir()
    shutil.copy(REAL / "ncu" / "profkit_ncu" / measured / "counters.csv", copy / "ncu")
    a = analyze_run(copy, workers=1, cache=False)
    k = a.table("ncu_kernels")
    assert set(k["kernel"]) <= set(a.table("top_kernels")["name"])
    assert (k["launches"] >= 3).all()
    ratio = k["ncu_us"] / k["trace_us"]
    assert ratio[k["trace_us"] > 100].between(0.9, 1.1).all()  # the same kernels
    found = {f.category: f for f in a.findings}
    gemm = k[k["short_name"].str.contains("gemm")]
    if run == "eltwise_chain":
        assert len(k) == 13 and (k["measured_bound"] == "memory").all()
        assert found["hbm_roof"].severity == "warning" and found["hbm_roof"].evidence["count"] == 13
    elif run == "precision":
        assert (gemm["tensor_pct"] == 0).all() and (gemm["measured_bound"] == "math").all()
        assert "ncu" in found["precision"].evidence and "tensor_cores" not in found
    else:
        assert (gemm["tensor_pct"] > 95).all() and "tensor_cores" not in found
