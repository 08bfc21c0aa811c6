"""Bytes moved and vector FLOPs of recorded ops (profkit.classify.traffic), every number
worked out by hand from the shapes; and the ingest columns that carry them."""

import math

import pytest

from profkit import schema as S
from profkit.classify.flops import flops_from_shapes
from profkit.classify.opfamilies import op_family
from profkit.classify.traffic import TRANSCENDENTAL_FLOPS, op_cost
from profkit.run.loader import load_run
from tests.factories import trace_doc, write_trace, x

T = [16384, 4096]  # 64 Mi fp32 elements: 256 MiB
MB = T[0] * T[1] * 4


def cost(name, dims, types, concrete=None, strides=None):
    flops = flops_from_shapes(name, dims, concrete)
    return op_cost(name, dims, types, concrete, flops, strides)


def test_unary_reads_and_writes_the_tensor():
    c = cost("aten::gelu", [T, []], ["float", ""])
    assert (c.read, c.write) == (MB, MB)
    assert c.flops == TRANSCENDENTAL_FLOPS * T[0] * T[1]


def test_binary_with_a_broadcast_operand_and_a_wrapped_scalar():
    c = cost("aten::add", [T, [4096], []], ["float", "float", "Scalar"])
    assert (c.read, c.write, c.flops) == (MB + 4096 * 4, MB, T[0] * T[1])
    scalar = cost("aten::mul", [T, []], ["float", "double"])  # a 0-d wrapped number
    assert (scalar.read, scalar.write) == (MB + 8, MB)


def test_an_expanded_view_reads_only_its_stored_elements():
    """Input Strides with a zero: a broadcast view (expand) of one element per row."""
    c = cost("aten::div", [T, []], ["float", "Scalar"], strides=[[1, 0], []])
    assert (c.read, c.write) == (T[0] * 4, MB)


def test_in_place_ops_write_their_first_input_and_comparisons_write_bools():
    c = cost("aten::add_", [T, T, []], ["c10::BFloat16", "c10::BFloat16", "Scalar"])
    assert (c.read, c.write) == (MB, MB / 2)
    eq = cost("aten::eq", [T, T], ["float", "float"])
    assert eq.write == T[0] * T[1]


def test_matmul_writes_the_product_its_flops_imply():
    c = cost("aten::mm", [[8192, 4096], [4096, 1024]], ["float", "float"])
    assert c.read == (8192 * 4096 + 4096 * 1024) * 4 and c.write == 8192 * 1024 * 4
    assert c.flops == 0  # matmul FLOPs live in the flops column (MFU's count)
    linear = cost("aten::linear", [[8, 512, 1024], [256, 1024], [256]],
                  ["c10::BFloat16"] * 3)
    assert linear.write == 8 * 512 * 256 * 2


def test_norm_softmax_and_reductions():
    ln = cost("aten::native_layer_norm", [T, [], [4096], [4096], []],
              ["float", "ScalarList", "float", "float", "Scalar"])
    assert (ln.read, ln.write) == (MB + 2 * 4096 * 4, MB)
    sm = cost("aten::_softmax_backward_data", [T, T, [], []], ["float", "float", "Scalar", "Scalar"])
    assert (sm.read, sm.write) == (2 * MB, MB)
    rows = cost("aten::sum", [T, [], [], []], ["float", "ScalarList", "Scalar", ""],
                ["", "[1]", "False", ""])
    assert (rows.read, rows.write) == (MB, T[0] * 4)
    full = cost("aten::mean", [T, []], ["float", ""])
    assert full.write == 4


def test_copies_casts_and_fills():
    cast = cost("aten::copy_", [T, T, []], ["c10::BFloat16", "float", "Scalar"])
    assert (cast.read, cast.write) == (MB, MB / 2)
    to = cost("aten::_to_copy", [T, [], []], ["float", "Scalar", "Scalar"], ["", "15", "0"])
    assert (to.read, to.write) == (MB, MB / 2)  # ScalarType 15: bfloat16
    fill = cost("aten::fill_", [T, []], ["float", "Scalar"])
    assert (fill.read, fill.write) == (0, MB)
    cat = cost("aten::cat", [[[8, 512, 1024]] * 3, []], ["TensorList", "Scalar"])
    assert cat.read == cat.write == 3 * 8 * 512 * 1024 * 4  # the list's dtype: fp32


def test_gather_scatter_and_embedding_move_the_rows_they_touch():
    emb = cost("aten::embedding", [[50000, 1024], [8, 512], [], [], []],
               ["float", "long int", "Scalar", "Scalar", "Scalar"])
    rows = 8 * 512 * 1024 * 4
    assert (emb.read, emb.write) == (8 * 512 * 8 + rows, rows)
    sel = cost("aten::index_select", [[100000, 256], [], [500000]], ["float", "Scalar", "long int"],
               ["", "0", ""])
    picked = 500000 * 256 * 4
    assert (sel.read, sel.write) == (500000 * 8 + picked, picked)
    add = cost("aten::scatter_add_", [[100000, 256], [], [500000, 256], [500000, 256]],
               ["float", "Scalar", "long int", "float"], ["", "0", "", ""])
    src = 500000 * 256 * 4
    assert (add.read, add.write) == (500000 * 256 * 8 + 2 * src, src)  # index, src, target rows


def test_foreach_and_fused_optimizers():
    w = [[4096, 4096]] * 3
    each = 3 * 4096 * 4096 * 4
    fe = cost("aten::_foreach_add_", [w, w, []], ["TensorList", "TensorList", "Scalar"])
    assert (fe.read, fe.write) == (2 * each, each)
    adam = cost("aten::_fused_adamw_", [w, w, w, w, [], [[]] * 3, []],
                ["TensorList"] * 6 + ["Scalar"])
    assert (adam.read, adam.write) == (4 * each, 3 * each)  # params, grads, m, v; p, m, v


def test_inductor_kernels_move_each_argument_once():
    c = cost("triton_red_fused_add_gelu_0", [T, T, [4096], [4096], [], []],
             ["float"] * 4 + ["Scalar"] * 2)
    assert c.read + c.write == 2 * MB + 2 * 4096 * 4


def test_ops_without_a_formula_have_no_cost():
    assert op_family("vllm::unified_attention") == ""
    assert math.isnan(cost("aten::sort", [T, [], []], ["float", "Scalar", "Scalar"]).read)
    assert math.isnan(cost("aten::add", [], []).read)
    assert math.isnan(cost("aten::index_select", [[10, 4]], ["float"]).read)  # index missing


def test_ingest_fills_the_cost_columns_once_per_distinct_shape(tmp_path):
    args = {"Input Dims": [T, []], "Input type": ["float", "Scalar"],
            "Input Strides": [[4096, 1], []], "Concrete Inputs": ["", "2"], "External id": 1}
    events = [x("aten::mul", "cpu_op", 10.0 * i, 5.0, **args) for i in range(3)]
    events.append(x("aten::empty", "cpu_op", 40.0, 1.0, **{"Input Dims": [[], []]}))
    run = load_run(write_trace(tmp_path / "r.json", trace_doc(events=events)), cache=False)
    ops = run.ranks[0].events
    mul = ops[ops[S.NAME] == "aten::mul"]
    assert list(mul[S.OP_READ_BYTES]) == [MB] * 3 and list(mul[S.OP_WRITE_BYTES]) == [MB] * 3
    assert list(mul[S.FLOPS_DTYPE].astype(str)) == ["fp32"] * 3
    assert ops.loc[ops[S.NAME] == "aten::empty", S.OP_READ_BYTES].isna().all()
    assert mul[S.FLOPS].isna().all()  # not a matmul: MFU's FLOPs are untouched


@pytest.mark.parametrize("name, family", [
    ("aten::add_", "elementwise"), ("aten::native_layer_norm_backward", "norm"),
    ("aten::_log_softmax", "softmax"), ("aten::_foreach_mul_", "foreach"),
    ("aten::_fused_adam_", "optimizer"), ("aten::cudnn_convolution", "conv"),
    ("aten::_flash_attention_backward", "attention"), ("triton_poi_fused_0", "triton"),
    ("aten::scatter_reduce_", "index"), ("aten::copy_", "copy"), ("aten::zero_", "fill")])
def test_families(name, family):
    assert op_family(name) == family
