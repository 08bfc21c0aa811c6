"""Op names by the family of their cost formula (profkit/classify/traffic.py): matrix
products, convolutions, attention, elementwise, norms, softmax, reductions, copies, fills,
gather / scatter / index, foreach ops, fused optimizers and Inductor's Triton kernels."""

from __future__ import annotations


def _names(*groups: str) -> frozenset[str]:
    return frozenset(n for g in groups for n in g.split())


MATMUL = _names("mm addmm bmm baddbmm matmul linear _scaled_mm _addmm_activation")
ATTENTION_FWD = _names("scaled_dot_product_attention _scaled_dot_product_flash_attention "
                       "_scaled_dot_product_flash_attention_for_cpu _flash_attention_forward "
                       "_scaled_dot_product_efficient_attention _efficient_attention_forward "
                       "_scaled_dot_product_cudnn_attention _cudnn_attention_forward")
CONV_FWD = _names("conv1d conv2d conv3d convolution _convolution cudnn_convolution "
                  "miopen_convolution miopen_depthwise_convolution mkldnn_convolution "
                  "conv_transpose1d conv_transpose2d conv_transpose3d "
                  "cudnn_convolution_transpose miopen_convolution_transpose")
# backward conv op -> positions of (grad_output, input, weight) among its arguments
CONV_BWD = {"convolution_backward": (0, 1, 2), "cudnn_convolution_backward": (1, 0, 2),
            "miopen_convolution_backward": (1, 0, 2)}
TRANSCENDENTAL = _names(
    "exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh atanh erf "
    "erfc erfinv sigmoid logsigmoid gelu silu mish softplus elu selu celu hardswish rsqrt sqrt "
    "pow reciprocal gelu_backward silu_backward tanh_backward sigmoid_backward mish_backward "
    "elu_backward softplus_backward logit lgamma digamma")
COMPARISON = _names("eq ne lt le gt ge isnan isinf isneginf isposinf isfinite logical_not "
                    "logical_and logical_or logical_xor")
ELEMENTWISE = TRANSCENDENTAL | COMPARISON | _names(
    "add sub rsub mul div neg abs sign clamp clamp_min clamp_max clip relu relu6 leaky_relu "
    "hardtanh hardsigmoid threshold threshold_backward hardtanh_backward leaky_relu_backward "
    "hardswish_backward hardsigmoid_backward maximum minimum fmod remainder floor ceil round "
    "trunc frac where masked_fill addcmul addcdiv lerp square bitwise_and bitwise_or "
    "bitwise_xor bitwise_not fill_diagonal floor_divide true_divide native_dropout_backward "
    "dropout_backward _masked_scale xlogy copysign nan_to_num heaviside")
NORM = _names("native_layer_norm native_group_norm native_batch_norm cudnn_batch_norm "
              "miopen_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training "
              "_native_batch_norm_legit_functional _fused_rms_norm rms_norm "
              "batch_norm_elemt batch_norm_stats _batch_norm_with_update "
              "native_layer_norm_backward native_group_norm_backward native_batch_norm_backward "
              "cudnn_batch_norm_backward miopen_batch_norm_backward _fused_rms_norm_backward "
              "batch_norm_backward")
SOFTMAX = _names("_softmax _log_softmax _safe_softmax _softmax_backward_data "
                 "_log_softmax_backward_data")
REDUCTION = _names("sum mean amax amin max min prod norm linalg_vector_norm var std var_mean "
                   "std_mean all any argmax argmin logsumexp count_nonzero nansum mse_loss "
                   "l1_loss smooth_l1_loss binary_cross_entropy _foreach_norm")
SCAN = _names("cumsum cumprod logcumsumexp")
COPY = _names("copy clone contiguous _to_copy tril triu flip roll constant_pad_nd "
              "reflection_pad1d reflection_pad2d replication_pad2d split_with_sizes_copy "
              "_chunk_cat cat stack _foreach_copy")
FILL = _names("fill zero normal uniform random bernoulli exponential")
INDEX = _names("embedding embedding_dense_backward index_select gather scatter scatter_add "
               "scatter_reduce index_add index_copy index_put _index_put_impl index "
               "index_fill masked_scatter nll_loss_forward nll_loss2d_forward "
               "nll_loss_backward nll_loss2d_backward")
FUSED_OPTIMIZER = {"_fused_adam": (0, 2, 3, 4), "_fused_adamw": (0, 2, 3, 4),
                   "_fused_sgd": (0, 2)}  # op -> lists written (params, states)
TRITON_PREFIXES = ("triton_poi_", "triton_red_", "triton_per_")

FAMILIES = ("matmul", "conv", "attention", "elementwise", "norm", "softmax", "reduction",
            "copy", "fill", "index", "foreach", "optimizer", "triton")
# Families whose consecutive kernels one generated kernel can do in one pass over memory.
FUSABLE = frozenset(("elementwise", "norm", "softmax", "reduction", "copy", "fill", "foreach"))


def base_name(name: str) -> tuple[str, bool]:
    """``aten::add_`` -> (``add``, in-place); namespaces and a trailing ``_`` dropped."""
    base = str(name).rsplit("::", 1)[-1]
    inplace = base.endswith("_") and not base.endswith("__")
    return (base[:-1] if inplace else base), inplace


def op_family(name: str) -> str:
    """The cost family of an op name (:data:`FAMILIES`), "" when it has no cost formula."""
    text = str(name)
    if text.startswith(TRITON_PREFIXES):
        return "triton"
    if "::" not in text:
        return ""
    base, _ = base_name(text)
    for family, names in (("matmul", MATMUL), ("attention", ATTENTION_FWD),
                          ("elementwise", ELEMENTWISE), ("norm", NORM), ("softmax", SOFTMAX),
                          ("reduction", REDUCTION), ("copy", COPY | SCAN), ("fill", FILL),
                          ("index", INDEX)):
        if base in names:
            return family
    if base in CONV_FWD or base in CONV_BWD or base.endswith("convolution_backward_input"):
        return "conv"
    if base.endswith("attention_backward"):
        return "attention"
    if base in FUSED_OPTIMIZER:
        return "optimizer"
    if base.startswith("_foreach_"):
        return "foreach"
    return ""
