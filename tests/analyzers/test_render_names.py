"""Kernel names as people read them, on real kernel names of the bundled runs, the public
traces and ../shared/corpus. Every expected short name is written by hand."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import orjson
import pytest

from profkit.classify.names import MAX_CHARS, short_kernel_name, short_kernel_names
from tests.conftest import CORPUS, REPO

RUNS = REPO / "samples" / "runs"
PUBLIC = REPO / "tests" / "data" / "public"
GELU = ("void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const::"
        "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >"
        "(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
        "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)")
MEAN = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps"
        "<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
        "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)")
FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
           "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
           "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::"
           "(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::"
           "BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)")
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, "
       "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >("
       "int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::"
       "MulFunctor<float> >, at::detail::Array<char*, 2>)")
VLLM_NORM = ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
             "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, "
             "c10::BFloat16*, c10::BFloat16 const*, float, int, int)")

# (folder holding the trace, full kernel name as recorded, short name written by hand)
CASES = [
    (RUNS / "zoo" / "balanced", GELU, "elementwise(GeluCUDA)"),
    (RUNS / "zoo" / "balanced", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
     "nvjet gemm 256x128 bf16"),
    (RUNS / "zoo" / "balanced",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "nccl AllReduce bf16 RING LL"),
    (RUNS / "profkit_fsdp", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "nccl AllGather RING LL"),
    (RUNS / "profkit_ddp", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_"
     "64x128x64_4x1x1_cga1x1x1_kernel0_0", "cudnn flash fprop 16-bit"),
    (PUBLIC / "param_dlrm_8rank", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, "
     "unsigned long, ncclWork*)", "nccl SendRecv int8 RING SIMPLE"),
    (PUBLIC / "amd_mi210_gpu_only", "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_"
     "ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x1x64_gkgs", "igemm fwd 128x128x32 bf16"),
    (PUBLIC / "tracelens_h100_bert_small", "void cutlass::Kernel2<cutlass_80_tensorop_bf16_"
     "s16816gemm_bf16_256x128_64x3_tn_align2>(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_"
     "64x3_tn_align2::Params)", "cutlass gemm 256x128 bf16"),
    (PUBLIC / "sglang_decode_replay", "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16E"
     "Lb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib", "aiter::add_rmsnorm_quant_kernel"),
    (CORPUS / "tracelens" / "h100", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_"
     "warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "xmma gemm bf16"),
    (CORPUS / "tracelens" / "h100", MEAN, "reduce(Mean)"),
    (CORPUS / "tracelens" / "b200", "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT",
     "nvjet gemm 64x64 bf16"),
    (CORPUS / "tracelens" / "b200", VLLM_NORM, "vllm::fused_add_rms_norm_kernel"),
    (CORPUS / "tracelens" / "b200", "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_"
     "lt_mul_sub_0", "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_g..."),
    (CORPUS / "hta" / "triton_example", "triton_poi_fused_add_cos_sin_0",
     "triton_poi_fused_add_cos_sin_0"),
    (CORPUS / "hta" / "trace_diff" / "control", "void cub::DeviceRadixSortOnesweepKernel<cub::"
     "DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(int*, int*, "
     "int*, int const*, long*, long const*, int*, int const*, int, int, int)",
     "cub::DeviceRadixSortOnesweepKernel"),
    (CORPUS / "hta" / "trace_diff" / "control",
     "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "nccl AllReduce float RING LL"),
    (CORPUS / "hta" / "trace_diff" / "control", MUL, "elementwise(Mul)"),
    (CORPUS / "hta" / "nccl_parser_config", FOREACH, "foreach(BinaryOpListAlpha)"),
    (CORPUS / "hta" / "nccl_parser_config", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_"
     "256x64_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4::Params)",
     "cutlass gemm 256x64 tf32"),
    (CORPUS / "hta" / "critical_path" / "alexnet", "ampere_sgemm_32x32_sliced1x4_tn",
     "ampere_sgemm_32x32_sliced1x4_tn"),
]


@functools.cache
def _trace_text(folder: Path) -> str:
    texts = []
    for path in sorted(folder.rglob("*.json*")):
        if ".profkit" in path.parts or path.name.startswith("."):
            continue
        raw = path.read_bytes()
        texts.append((gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode())
    return "\n".join(texts)


def _skip_without(folder: Path) -> None:
    if not folder.exists():
        pytest.skip(f"{folder} not found (../shared/corpus absent)")


@pytest.mark.parametrize("folder, name, short", CASES, ids=[c[2] for c in CASES])
def test_real_kernel_names_read_as_people_read_them(folder, name, short):
    _skip_without(folder)
    # the name is a real one: it is in the trace as written (JSON-escaped)
    assert orjson.dumps(name).decode()[1:-1] in _trace_text(folder)
    assert short_kernel_name(name) == short


def test_the_issue_examples():
    assert short_kernel_name("nvjet_tst_64x32_64x16_4x1_v_bz_coopB_NNT") == "nvjet gemm 64x32 bf16"
    assert short_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == \
        "nccl AllReduce bf16 RING LL"
    assert short_kernel_name("triton_poi_fused_add_mul_0") == "triton_poi_fused_add_mul_0"


def test_long_names_are_cut_from_the_right_after_the_meaningful_part():
    name = "triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0"
    short = short_kernel_name(name)
    assert len(short) == MAX_CHARS and short == name[:MAX_CHARS - 3] + "..."
    # a template-heavy name keeps its op, never the first 60 characters of the templates
    assert not short_kernel_name(GELU).startswith("void")


def test_names_alike_stay_apart_in_one_table():
    nnt = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
    tnt = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<{}>, " \
           "std::array<char*, 1ul> >(int, at::native::FillFunctor<{}>, std::array<char*, 1ul>)"
    names = [nnt, tnt, nnt, fill.format("float", "float"), fill.format("long", "long")]
    assert short_kernel_names(names) == [
        "nvjet gemm 256x128 bf16 [NNT]", "nvjet gemm 256x128 bf16 [TNT]",
        "nvjet gemm 256x128 bf16 [NNT]", "elementwise(Fill) [f32]", "elementwise(Fill) [i64]"]
    assert short_kernel_names([GELU, MEAN]) == ["elementwise(GeluCUDA)", "reduce(Mean)"]


TOP_KERNEL_RUNS = [RUNS / "zoo" / "straggler", RUNS / "stock_ddp", PUBLIC / "param_dlrm_8rank",
                   PUBLIC / "amd_mi210_gpu_only", CORPUS / "tracelens" / "h100",
                   CORPUS / "hta" / "trace_diff" / "control"]


@pytest.mark.parametrize("folder", TOP_KERNEL_RUNS, ids=lambda p: p.name)
def test_distinct_kernels_of_a_real_run_get_distinct_short_names(folder):
    from profkit.analyzers.executor import analyze_run

    _skip_without(folder)
    names = analyze_run(folder, workers=1).table("top_kernels")["name"].astype(str).tolist()
    short = short_kernel_names(names)
    assert len(set(short)) == len(set(names)) and len(short) == len(names)
    assert all(len(s) <= MAX_CHARS + 30 for s in short)
    assert sum(s != n for s, n in zip(short, names)) > 0
