"""FLOP formulas with expected values worked out by hand, FLOPs read from hand-built traces,
and whole-network totals of real ResNet traces checked against the ResNet architecture."""

import math

import pytest
from profkit.analyzers.findings.judge import judged

from profkit import schema as S
from profkit.classify.flops import dtype_precision, flops_from_shapes, kernel_precision, shape_flops
from profkit.run.loader import load_run
from tests.conftest import CORPUS, PUBLIC_CORPUS
from tests.factories import trace_doc, write_trace, x

# conv2d(input [2, 3, 9, 9], weight [4, 3, 3, 3], stride 2, padding 1, dilation 1): output
# side (9 + 2*1 - 1*(3-1) - 1) // 2 + 1 = 5; each of 2 x 4 x 5 x 5 outputs is a dot product
# of 3 x 3 x 3 multiply-adds: 2 FLOP x 2 x 4 x 25 x 27 = 10,800.
CONV_FLOPS = 2 * 2 * 4 * 5 * 5 * (3 * 3 * 3)
X9, W3 = [2, 3, 9, 9], [4, 3, 3, 3]


@pytest.mark.parametrize("name, dims, concrete, expected", [
    ("aten::mm", [[2, 3], [3, 4]], None, 2 * 2 * 4 * 3),                    # 2MNK
    ("aten::addmm", [[4], [2, 3], [3, 4], [], []], None, 2 * 2 * 4 * 3),   # bias first
    ("aten::bmm", [[5, 2, 3], [5, 3, 4]], None, 5 * 2 * 2 * 4 * 3),
    ("aten::baddbmm", [[5, 2, 4], [5, 2, 3], [5, 3, 4]], None, 5 * 2 * 2 * 4 * 3),
    # matmul broadcasts [2, 5, 3] x [3, 4]: two [5, 3] x [3, 4] products
    ("aten::matmul", [[2, 5, 3], [3, 4]], None, 2 * 2 * 5 * 4 * 3),
    ("aten::matmul", [[3], [3, 4]], None, 2 * 1 * 4 * 3),                  # vector x matrix
    ("aten::linear", [[2, 5, 3], [4, 3], [4]], None, 2 * (2 * 5) * 4 * 3),  # weight [out, in]
    ("aten::conv2d", [X9, W3, [], [], [], [], []],
     ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"], CONV_FLOPS),
    ("aten::convolution", [X9, W3, [], [], [], [], [], [], []],
     ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"], CONV_FLOPS),
    # miopen_convolution(self, weight, bias, padding, stride, ...): padding before stride
    ("aten::miopen_convolution", [X9, W3, [], [], [], [], [], [], []],
     ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False"], CONV_FLOPS),
    # cudnn_convolution(self, weight, padding, stride, dilation, groups, ...)
    ("aten::cudnn_convolution", [X9, W3, [], [], [], [], [], [], []],
     ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"], CONV_FLOPS),
    # depthwise, groups 3: weight [3, 1, 3, 3], stride 1 padding 1 keeps 9 x 9:
    # 2 x N 2 x Cout 3 x 81 positions x (1 x 3 x 3)
    ("aten::conv2d", [X9, [3, 1, 3, 3], [], [], [], [], []],
     ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "3"], 2 * 2 * 3 * 81 * 9),
    # conv2d with padding="same" (stride 1): output 9 x 9
    ("aten::conv2d", [X9, W3, [], [], [], [], []],
     ["", "", "", "[1, 1]", "same", "[1, 1]", "1"], 2 * 2 * 4 * 81 * 27),
    # transposed: each of the 1 x 4 x 5 x 5 inputs meets 2 x 3 x 3 weights
    ("aten::conv_transpose2d", [[1, 4, 5, 5], [4, 2, 3, 3], [], [], [], [], [], []], None,
     2 * (4 * 25) * (2 * 9)),
    # backward of the conv above, both gradients (input, weight), then weight only
    ("aten::convolution_backward", [[2, 4, 5, 5], X9, W3] + [[]] * 8,
     ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
      "[True, True, False]"], 2 * CONV_FLOPS),
    ("aten::convolution_backward", [[2, 4, 5, 5], X9, W3] + [[]] * 8,
     ["", "", "", "[0]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
      "[False, True, False]"], CONV_FLOPS),
    # old cudnn_convolution_backward_input(self_size, grad_output, weight, ...)
    ("aten::cudnn_convolution_backward_input", [[], [2, 4, 5, 5], W3], None, CONV_FLOPS),
    # attention q [B 1, H 2, S 4, D 8], k and v [1, 2, Sk 6, 8]: q.k and p.v,
    # 2 x (B H S Sk) x (D + Dv)
    ("aten::_scaled_dot_product_flash_attention", [[1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8]],
     ["", "", "", "0.", "False", "False", ""], 2 * (1 * 2 * 4 * 6) * (8 + 8)),
    # causal with S = Sk = 4: query i sees i + 1 keys, 1 + 2 + 3 + 4 = 10 of 16 pairs
    ("aten::scaled_dot_product_attention", [[1, 2, 4, 8]] * 3,
     ["", "", "", "", "0.", "True", "", "False"], 2 * (1 * 2 * 4 * 4) * 16 * 10 / 16),
    # _flash_attention_forward lays q out as [B, S, H, D]: B 1, S 4, H 2, D 8; Sk 6
    ("aten::_flash_attention_forward", [[1, 4, 2, 8], [1, 6, 2, 8], [1, 6, 2, 8]] + [[]] * 12,
     ["", "", "", "", "", "4", "6", "0.", "False", "False", "0.125"],
     2 * (1 * 4 * 2 * 6) * (8 + 8)),
    # backward: five products instead of two; grad_out comes first
    ("aten::_scaled_dot_product_flash_attention_backward",
     [[1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8]], None,
     2.5 * 2 * (1 * 2 * 4 * 6) * (8 + 8)),
])
def test_flops_from_shapes(name, dims, concrete, expected):
    assert flops_from_shapes(name, dims, concrete) == pytest.approx(expected)


@pytest.mark.parametrize("name, dims, concrete", [
    ("aten::add", [[2, 3]], None), ("aten::mm", [[2, 3]], None), ("aten::mm", "no", None),
    ("aten::conv2d", [X9, W3, [], [], [], [], []], None),  # stride unknown: output unknown
    ("aten::_flash_attention_forward", [[40, 2, 8], [40, 2, 8], [40, 2, 8]], None),  # packed
])
def test_unknown_ops_and_shapes_have_no_flops(name, dims, concrete):
    assert math.isnan(flops_from_shapes(name, dims, concrete))


HUGE = 2**62  # a dimension no tensor has


@pytest.mark.parametrize("name, dims, concrete", [
    ("aten::linear", [[HUGE] * 20, [HUGE, HUGE]], None),  # an int past any float: overflow
    ("aten::scaled_dot_product_attention", [[HUGE] * 20] * 3, None),
    ("aten::mm", [[HUGE, HUGE], [HUGE, HUGE]], None),     # 1.9e56 FLOPs: no op does that
    ("aten::mm", [[-4, 3], [3, 4]], None),                # negative
    ("aten::mm", [[1e308, 2], [2, 1e308]], None),         # inf
    ("aten::conv2d", [X9, W3, [], [], [], [], []],        # stride 0: a division by zero
     ["", "", "", "[0, 0]", "[1, 1]", "[1, 1]", "1"]),
])
def test_shapes_no_op_can_have_drop_that_ops_flops(name, dims, concrete):
    flops, dropped = shape_flops(name, dims, concrete)
    assert math.isnan(flops) and dropped
    assert math.isnan(flops_from_shapes(name, dims, concrete))


def test_a_hostile_op_costs_only_its_own_flops(tmp_path):
    """One op with 2**62-sized dimensions (it raised OverflowError and lost the whole rank)
    and one with an impossible recorded count: both lose their FLOPs, with one note; the
    other ops keep theirs."""
    ev = _events(tmp_path, [
        x("aten::linear", "cpu_op", 0.5, 7.0, **{"Input Dims": [[HUGE] * 20, [HUGE, HUGE]]}),
        x("aten::mm", "cpu_op", 8.0, 5.0, flops=1e308),
        x("aten::mm", "cpu_op", 20.0, 5.0, **{"Input Dims": [[64, 32], [32, 16]]})])
    assert ev[S.FLOPS].isna().tolist() == [True, True, False]
    assert ev[S.FLOPS].iloc[2] == 2 * 64 * 16 * 32
    run = load_run(tmp_path / "t.json", cache=False)
    notes = [n for n in run.notes if "FLOPs of 2 ops dropped" in n]
    assert len(notes) == 1 and "t.json" in notes[0]


@pytest.mark.parametrize("name, precision", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "bf16"),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "bf16"),  # under bf16 aten::mm
    ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "bf16"),
    # fp16 and bf16 apart (issue 40: an fp16 AMP run was labelled bf16)
    ("volta_s884gemm_fp16_128x128_ldg8_f2f_nn", "fp16"),
    ("volta_h884gemm_64x128_ldg8_nn", "fp16"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "fp16"),
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", "fp16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "bf16"),
    ("void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>",
     "bf16"),
    ("Cijk_Alik_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "fp16"),
    ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16", "fp8"),  # block-scaled, not fp32
    ("bmm_Bfloat16_MxE2m1MxE4m3_Fp32_t128x16x256u2", "fp8"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>", "fp8"),
    ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16", "fp8"),
    ("bmm_E2m1_E2m1E2m1_Fp32_t128x8x256", "fp4"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16", "tf32"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>", "tf32"),
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8", "fp32"),
    ("ampere_sgemm_128x64_nn", "fp32"),
    ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int)", "fp32"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1", "bf16"),
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1", "fp32"),
    ("attn_fwd", ""),
    # cuBLASLt's nvjet names its input types: qq is fp8 x fp8 (H200, torch._scaled_mm e4m3)
    ("nvjet_sm90_qqtst_144x128_128x4_1x2_h_bz_coopA_NNT", "fp8"),
    ("volta_dgemm_64x64_nn", "fp64"),
    ("void cutlass::Kernel<cutlass_80_tensorop_d884gemm_64x64_16x4_nn_align1>", "fp64"),
    ("void cutlass::Kernel<cutlass_80_tensorop_i16832gemm_s8_256x128_64x3_tn_align16>", "int8"),
    ("Cijk_Alik_Bljk_DB_MT64x64x16_MI16x16x4", "fp64"),
])
def test_kernel_precision(name, precision):
    assert kernel_precision(name) == precision


def test_dtype_precision_takes_the_widest_float_input():
    assert dtype_precision(["c10::BFloat16", "c10::BFloat16", "Scalar"]) == "bf16"
    assert dtype_precision(["c10::Float8_e4m3fn", "c10::BFloat16"]) == "bf16"
    assert dtype_precision(["float", "c10::Half"]) == "fp32"
    assert dtype_precision(["c10::Half", "c10::Half"]) == "fp16"  # not bf16 (issue 40)
    assert dtype_precision(["long", ""]) == "" and dtype_precision(None) == ""


def test_a_scaled_gemm_is_the_precision_of_its_operands_not_of_its_scales():
    fp8 = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "", "c10::BFloat16"]
    assert dtype_precision(fp8, "aten::_scaled_mm") == "fp8"
    assert dtype_precision(fp8) == "fp32"  # any other op: the widest input


def _events(tmp_path, events):
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    return load_run(path, cache=False).ranks[0].events


def test_ingest_fills_flops_and_precision_from_input_dims(tmp_path):
    """Wrapper and inner op both carry FLOPs (the analyzer counts the outermost once)."""
    dims = {"Input Dims": [[64, 32], [32, 16]], "Input type": ["c10::BFloat16"] * 2}
    ev = _events(tmp_path, [
        x("aten::linear", "cpu_op", 0.5, 7.0, **{"Input Dims": [[64, 32], [16, 32], [16]]}),
        x("aten::mm", "cpu_op", 1.0, 5.0, **dims)]).set_index(S.NAME)
    assert ev.loc["aten::mm", S.FLOPS] == ev.loc["aten::linear", S.FLOPS] == 2 * 64 * 16 * 32
    assert ev.loc["aten::mm", S.FLOPS_DTYPE] == "bf16" and ev.loc["aten::linear", S.FLOPS_DTYPE] == ""


def test_conv_without_concrete_inputs_takes_its_output_from_the_backward_node(tmp_path):
    """Old traces (PyTorch 1.9): no Concrete Inputs. The forward conv's output size is the
    input of its backward node (same Sequence number); the backward op computes the
    gradients whose leaf ops run inside it (here the weight gradient only)."""
    fwd = {"Input Dims": [X9, W3, [], [], [], [], []], "Sequence number": 7}
    ev = _events(tmp_path, [
        x("aten::conv2d", "cpu_op", 1.0, 5.0, **fwd),
        x("CudnnConvolutionBackward", "cpu_op", 20.0, 9.0, tid=200,
          **{"Input Dims": [[2, 4, 5, 5]], "Sequence number": 7}),
        x("aten::cudnn_convolution_backward", "cpu_op", 21.0, 7.0, tid=200,
          **{"Input Dims": [X9, [2, 4, 5, 5], W3] + [[]] * 8}),
        x("aten::cudnn_convolution_backward_weight", "cpu_op", 22.0, 5.0, tid=200,
          **{"Input Dims": [[], [2, 4, 5, 5], X9] + [[]] * 7}),
    ]).set_index(S.NAME)
    assert ev.loc["aten::conv2d", S.FLOPS] == CONV_FLOPS
    assert ev.loc["aten::cudnn_convolution_backward", S.FLOPS] == CONV_FLOPS  # one gradient


R18_FILE = CORPUS / "tracelens" / "mi300" / "resnet_act_checkpoint.json.gz"
R50_FILE = PUBLIC_CORPUS / "resnet50_nw0" / "worker0.1623143089861.pt.trace.json.gz"


def resnet_convs(blocks: list[int], bottleneck: bool, image: int = 224):
    """(Cin, Cout, kernel, stride, input side) of every conv of torchvision's ResNet (v1.5:
    stride on the 3x3), from the architecture alone, and the features before the fc."""
    convs, side, cin = [(3, 64, 7, 2, image)], image // 4, 64  # stem /2, max-pool /2
    for stage, n in enumerate(blocks):
        width = 64 * 2 ** stage
        cout = width * 4 if bottleneck else width
        for b in range(n):
            stride = 2 if b == 0 and stage > 0 else 1
            if bottleneck:
                convs += [(cin, width, 1, 1, side), (width, width, 3, stride, side),
                          (width, cout, 1, 1, side // stride)]
            else:
                convs += [(cin, width, 3, stride, side), (width, width, 3, 1, side // stride)]
            if b == 0 and (stride != 1 or cin != cout):
                convs.append((cin, cout, 1, stride, side))  # downsample shortcut
            cin, side = cout, side // stride
    return convs, cin


def conv_macs(convs) -> int:
    return sum(ci * co * k * k * (side // s) ** 2 for ci, co, k, s, side in convs)


def test_resnet_architecture_matches_published_macs():
    """torchvision's model table: ResNet-18 1.81, ResNet-50 4.09 GFLOPS (multiply-adds)."""
    for blocks, bottleneck, published in (([2, 2, 2, 2], False, 1.81e9), ([3, 4, 6, 3], True, 4.09e9)):
        convs, features = resnet_convs(blocks, bottleneck)
        assert conv_macs(convs) + features * 1000 == pytest.approx(published, rel=0.005)


def _flops_per_step(path):
    from profkit.analyzers.measure.efficiency import analyze_efficiency

    row = judged(analyze_efficiency(load_run(path, cache=False))).tables["efficiency"].iloc[0]
    return row["trace_flops"] / row["steps"], row


@pytest.mark.skipif(not R18_FILE.exists(), reason=f"corpus not found at {CORPUS}")
def test_resnet18_trace_flops_match_the_architecture():
    """MI300X, ResNet-18, batch 10, activation checkpointing: per step the forward, the
    checkpointed re-forward (every conv but the stem), and the backward (input and weight
    gradients, no input gradient for the stem). Profkit counted 0.03 GFLOP per step (the
    fc only) before convolutions were counted."""
    convs, features = resnet_convs([2, 2, 2, 2], False)
    stem = 3 * 64 * 7 * 7 * 112 * 112
    fwd = conv_macs(convs) + features * 1000
    expected = 2 * 10 * (fwd + (conv_macs(convs) - stem) + (2 * fwd - stem))
    per_step, row = _flops_per_step(R18_FILE)
    assert per_step == pytest.approx(expected, rel=1e-6)
    assert row["precision_mix"] == "bf16:1.00" and row["device_model"] == "MI300X"


@pytest.mark.skipif(not R50_FILE.exists(), reason=f"public corpus not found at {PUBLIC_CORPUS}")
def test_resnet50_trace_flops_match_the_architecture():
    """V100, torchvision ResNet-50, batch 32, PyTorch 1.9 (no Concrete Inputs): forward,
    backward with both gradients except the stem's input. ~778 GFLOP per step: the brief's
    "~390 GFLOP" counts multiply-adds (4.1 G per image x 32 x 3). Was 0.4 GFLOP per step."""
    convs, features = resnet_convs([3, 4, 6, 3], True)
    fwd = conv_macs(convs) + features * 1000
    expected = 2 * 32 * (3 * fwd - 3 * 64 * 7 * 7 * 112 * 112)
    per_step, row = _flops_per_step(R50_FILE)
    assert per_step == pytest.approx(expected, rel=1e-6)
    assert per_step == pytest.approx(2 * 4.09e9 * 32 * 3, rel=0.02)  # published MACs
    assert row["precision_mix"] == "fp32:1.00" and row["flop_coverage"] > 0.95
    assert 0.2 < row["mfu"] < 0.5  # fp32 training on a 15.7 TFLOP/s V100
