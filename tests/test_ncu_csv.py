"""Nsight Compute's CSV (real ones, from the H100 captures in samples/runs/why/ncu), the
metrics asked for, the names that join ncu's kernels to the trace's, and the stored table."""

import math
from pathlib import Path

import pytest

from profkit.classify.kernelkey import (
    function_name,
    kernel_key,
    kernels_regex,
    match_names,
    name_pattern,
)
from profkit.model import SkippedFile
from profkit.run.ncufiles import load_ncu_counters
from profkit.trace import ncu as N

NCU = Path(__file__).resolve().parents[1] / "samples" / "runs" / "why" / "ncu"
_, ALL = N.metrics_to_ask({N.base_name(m) for c in N.METRICS for m in c.names}
                          | {N.base_name(f.format(r)) for f in N.STALL_FAMILIES[:1]
                             for r in N.STALL_REASONS})


def rows_of(name: str) -> list[dict]:
    return N.parse_csv((NCU / f"{name}.csv").read_text(), ALL)


def test_real_eltwise_csv_has_16_launches_in_base_units():
    rows = rows_of("eltwise_chain")
    assert len(rows) == 16
    first = rows[0]
    assert first["id"] == 0 and first["pid"] == 1345
    assert first["function"] == "vectorized_elementwise_kernel"
    assert first["duration_ns"] == 175_392  # "175,392" ns
    assert first["dram_read_bytes"] == 268_451_584
    assert first["dram_pct"] == pytest.approx(87.87)
    assert math.isnan(first["occupancy_pct"])  # not asked in that capture: missing, not 0
    total_gb = sum(r["dram_read_bytes"] + r["dram_write_bytes"] for r in rows) / 1e9
    assert total_gb == pytest.approx(5.2845 + 3.9912, abs=0.01)  # samples/runs/why/README.md


def test_real_gemm_csvs_tell_tensor_pipes_apart():
    fp32 = [r for r in rows_of("precision_fp32") if "gemm" in r["kernel"]]
    bf16 = [r for r in rows_of("precision_bf16") if r["kernel"].startswith("nvjet")]
    assert fp32 and all(r["tensor_pct"] == 0 and r["fma_pct"] > 75 for r in fp32)
    assert len(bf16) == 8 and all(r["tensor_pct"] > 95 for r in bf16)


def test_units_are_scaled_and_bad_values_are_missing():
    assert N.number("1.5", "Mbyte") == 1.5e6
    assert N.number("2", "usecond") == 2000
    assert N.number("3", "Gbyte/second") == 3e9
    assert N.number("1,234", "byte") == 1234
    assert math.isnan(N.number("n/a", "%")) and math.isnan(N.number(None))


def test_wide_raw_page_reads_like_the_long_one():
    text = ('"ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__bytes_read.sum"\n'
            '"","","","usecond","Mbyte"\n'
            '"0","7","void k<float>(float*)","2.5","1.5"\n')
    (row,) = N.parse_csv(text, ALL)
    assert row["duration_ns"] == 2500 and row["dram_read_bytes"] == 1.5e6
    assert row["function"] == "k" and row["pid"] == 7


def test_metrics_asked_are_those_this_ncu_knows():
    known = {"gpu__time_duration", "dram__throughput",
             "smsp__warp_issue_stalled_barrier_per_warp_active"}
    asked, columns = N.metrics_to_ask(known)
    assert columns == {"duration_ns": "gpu__time_duration.sum",
                       "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                       "stall_barrier": "smsp__warp_issue_stalled_barrier_per_warp_active.pct"}
    assert len(asked) == 3
    # ncu could not say what it knows: the metrics seen working on an H100, no stall reasons
    _, columns = N.metrics_to_ask(None)
    assert set(columns) == set(N.FALLBACK)
    listing = (NCU / "query_metrics_excerpt.txt").read_text()
    assert {"dram__bytes", "sm__throughput", "gpu__time_duration"} <= N.known_metrics(listing)


def test_table_round_trip(tmp_path):
    rows = rows_of("precision_bf16")
    rows[0]["trace_kernel"] = "void at::native::k()"
    (tmp_path / "ncu").mkdir()
    (tmp_path / "ncu" / "counters.csv").write_bytes(N.write_table(rows))
    table = load_ncu_counters(tmp_path)
    assert list(table.columns) == list(N.COLUMNS) and len(table) == len(rows)
    assert table["tensor_pct"].max() > 95 and table["occupancy_pct"].isna().all()
    assert table.loc[0, "trace_kernel"] == "void at::native::k()"
    assert table.loc[1, "trace_kernel"] == ""


def test_missing_and_bad_tables(tmp_path):
    assert load_ncu_counters(tmp_path).empty
    (tmp_path / "ncu").mkdir()
    (tmp_path / "ncu" / "counters.csv").write_text("what,ever\n1,2\n")
    skipped: list[SkippedFile] = []
    assert load_ncu_counters(tmp_path, skipped).empty
    assert "not a profkit ncu table" in skipped[0].reason


TRACE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
         "std::array<char*, 3ul>)")
NCU_NAME = ("void vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, std::array<char *, 3>>"
            "(int, T2, T3)")


@pytest.mark.parametrize("trace, ncu", [
    (TRACE, NCU_NAME),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>"
     "(int, float, float const*, float const*, float const*, float*, float*, float*)",
     "void unnamed>::vectorized_layer_norm_kernel<float, float, 0>(int, T2, const T1 *, "
     "const T1 *, const T1 *, T2 *, T2 *, T1 *)"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
     "at::native::CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add"
     "<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
     "CUDAFunctor_add<float> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<float> "
     "const&)::{lambda(int)#1})",
     "void elementwise_kernel<128, 2, void gpu_kernel_impl_nocast<CUDAFunctor_add<float>>("
     "TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"),
])
def test_two_demanglings_share_a_key(trace, ncu):
    assert kernel_key(trace) == kernel_key(ncu)
    assert function_name(trace) == function_name(ncu)


def test_match_names_tells_functors_apart_and_leaves_strangers_out():
    mul = TRACE.replace("CUDAFunctor_add", "CUDAFunctor_mul")
    found = match_names([NCU_NAME, "void other_kernel<1>(int)"], [mul, TRACE])
    assert found == {NCU_NAME: TRACE}


@pytest.mark.parametrize("run, csv", [("eltwise_chain", "eltwise_chain"),
                                      ("precision", "precision_fp32"),
                                      ("precision_fixed", "precision_bf16")])
def test_each_kernels_pattern_matches_its_ncu_name_alone(run, csv):
    """ncu --kernel-name-base demangled --kernel-name regex:...: each trace kernel's pattern
    picks out its own instantiation among ncu's names (13 vectorized/elementwise kernels
    of one function, three nvjet GEMMs, ...), and the join pairs them all."""
    import re

    from profkit.analyzers.executor import analyze_run

    trace = analyze_run(NCU.parent / run, workers=1).table("top_kernels")["name"].tolist()
    ncu = list(dict.fromkeys(r["kernel"] for r in rows_of(csv)))
    for name in trace:
        hits = [n for n in ncu if re.search(name_pattern(name), n)]
        assert len(hits) == 1, (name, hits)
    assert len(match_names(ncu, trace)) == len(ncu)
    both = re.compile(kernels_regex(trace[:2]))
    assert sum(bool(both.search(n)) for n in ncu) == 2


# What ncu 2025.3 matched with --kernel-name-base mangled on the H100 (eltwise_chain's top 5)
MANGLED = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEESt5arrayIPcLm3EEEE"
    "viT0_T1_",
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal"
    "10MulFunctorIfEEEESt5arrayIPcLm2EEEEviT0_T1_",
    "_ZN2at6native53_GLOBAL__N__21739cd4_20_layer_norm_kernel_cu_9c5ada8a28vectorized_layer_norm_"
    "kernelIffLb0EEEviT0_PKT_S6_S6_PS3_S7_PS4_",
    "_ZN2at6native43_GLOBAL__N__b6de9c8c_10_SoftMax_cu_9f978f6322cunn_SoftMaxForwardRegIfffNS1_22"
    "SoftMaxForwardEpilogueElLi4EEEvPT1_PKT_T3_",
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_15CUDAFunctor_"
    "addIfEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
)


def test_patterns_match_mangled_names_too():
    """ncu --kernel-name-base mangled: built-in types and repeats are spelled otherwise there
    (f, Pc, S0_), so a pattern holds neither; each picks its own instantiation."""
    import re

    from profkit.analyzers.executor import analyze_run

    trace = analyze_run(NCU.parent / "eltwise_chain", workers=1).table("top_kernels")["name"]
    for name, mangled in zip(trace.tolist()[:5], MANGLED):
        hits = [m for m in MANGLED if re.search(name_pattern(name), m)]
        assert hits == [mangled], name_pattern(name)
