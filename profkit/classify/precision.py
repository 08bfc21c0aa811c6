"""The precision a GEMM, convolution or attention kernel ran in: from its name (cuBLAS,
CUTLASS, cuDNN, nvjet, Tensile), or from its op's input dtypes. fp16 and bf16 are kept
apart; a name that says 16-bit float but not which is "16-bit" until the op's dtype says."""

from __future__ import annotations

import functools
import re

# --- precision --------------------------------------------------------------------------
# The precision classes a GEMM / attention kernel runs in; peaks are per class
# (analyzers/measure/devices.py). bf16 and fp16 are kept apart (a label must say which ran)
# though they share one tensor-core rate on every device that has both (V100 and T4 have
# fp16 only); "fp16" is last among the floats so that the widest-input rule below is unchanged.
PRECISIONS = ("fp32", "tf32", "bf16", "fp8", "fp4", "fp16")
# a kernel name that says 16-bit float but not which (cuDNN's generated "f16" kernels run
# both): the op's dtype tells (:func:`refine_precision`), else it stays "16-bit"
HALF_WIDTH = "16-bit"
SIXTEEN_BIT = ("bf16", "fp16", HALF_WIDTH)

# PyTorch dtype names as the profiler writes them in "Input type".
_TYPE_PRECISION = {
    "float": "fp32", "c10::bfloat16": "bf16", "c10::half": "fp16", "half": "fp16",
    "c10::float8_e4m3fn": "fp8", "c10::float8_e5m2": "fp8", "c10::float8_e4m3fnuz": "fp8",
    "c10::float8_e5m2fnuz": "fp8", "c10::float4_e2m1fn_x2": "fp4",
}


# Ops whose first two inputs are the operands and the rest their fp32 scales and bias: the
# operands say the precision (an fp8 ``_scaled_mm`` is no fp32 GEMM for its fp32 scales).
SCALED_GEMMS = frozenset(("aten::_scaled_mm", "aten::_scaled_grouped_mm", "aten::_scaled_mm_v2"))


def dtype_precision(types: object, name: str = "") -> str:
    """Precision class of an op from its ``Input type`` list: the widest floating-point
    tensor input (an fp8 x bf16 product runs at the bf16 rate), of the two operands alone
    for a scaled GEMM (:data:`SCALED_GEMMS`); "" when none is known."""
    if not isinstance(types, list):
        return ""
    if name in SCALED_GEMMS:
        types = types[:2]
    found = [_TYPE_PRECISION.get(str(t).lower(), "") for t in types]
    found = [p for p in found if p]
    return min(found, key=_WIDTH.index) if found else ""


# widest first: an fp8 x bf16 product runs at the 16-bit rate
_WIDTH = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")


# Precision from a GEMM / conv / attention kernel's name, first match wins. The name says
# what ran (an fp32 op runs a TF32 kernel when TF32 is allowed), so it beats the op's dtype.
_KERNEL_PRECISION = tuple((p, re.compile(rx, re.IGNORECASE)) for p, rx in (
    # fp8 anywhere: also block-scaled fp8 x fp4 (bmm_MxE4m3_MxE2m1..., runs at the fp8 rate)
    # and fp8 attention with a bf16 output (fmha..QkvE4m3OBfloat16)
    # (cuBLASLt's nvjet names the input types: nvjet_sm90_qqtst_... is fp8 x fp8)
    ("fp8", r"e4m3|e5m2|fp8|f8f6f4|float8|nvjet_(?:sm\d+_)?qq"),
    ("fp4", r"e2m1|fp4|nvf4|mxf4|float4"),
    ("tf32", r"tf32|xf32"),
    # cuBLAS / CUTLASS / cuDNN 16-bit, bf16 before fp16 ("bf16" holds "f16"): nvjet's type
    # code (nvjet_tst_: bf16, seen under bf16 aten::addmm; nvjet_hsh_: fp16), hmma
    # h884 / h1688 / h16816 and s884gemm_fp16 are fp16
    ("bf16", r"bf16|bfloat16|nvjet_(?:sm\d+_)?t[a-z]{2}_"),
    (HALF_WIDTH, r"^cudnn_generated_.*_f16_"),
    ("fp16", r"fp16|f16|half|hgemm|h\d{3,5}gemm|nvjet_(?:sm\d+_)?h[a-z]{2}_"),
    # Ampere cuBLAS / CUTLASS fp32 GEMMs on TF32 tensor cores (cutlass_80_tensorop_s1688gemm)
    ("tf32", r"(?:_80_|ampere).*s(?:1688|16816)gemm"),
    # fp64 (dgemm, CUTLASS d884) and int8 (imma, i16832, s8 x s8): never fp32 to move to bf16
    ("fp64", r"dgemm|d\d{3,5}gemm|f64|fp64|<double[,>]"),
    ("int8", r"imma|i\d{3,5}gemm|i8i8|s8s8|int8"),
    # fp32 SIMT: sgemm, cuDNN scudnn, gemmSN, xmma f32 without tf32, float template args
    ("fp32", r"sgemm|scudnn|gemmsn|f32f32_f32f32|fp32|<float[,>]"),
))
# AMD Tensile / hipBLASLt: Cijk_<A index>_<B index>_<types>..., the first type code is the
# input's: S fp32, H fp16, B bf16, X xf32, F8 / B8 fp8 ("Cijk_Alik_Bljk_BBS_BH_...").
_TENSILE_RE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_([A-Z0-9]+)")
_TENSILE_TYPES = {"F8": "fp8", "B8": "fp8", "I8": "int8", "S": "fp32", "H": "fp16", "B": "bf16",
                  "X": "tf32", "D": "fp64"}


def refine_precision(by_name: str, by_dtype: str) -> str:
    """A kernel's precision from its name, a name's bare "16-bit" made bf16 or fp16 by the
    op's dtype; the dtype's where the name says nothing."""
    if by_name == HALF_WIDTH and by_dtype in ("bf16", "fp16"):
        return by_dtype
    return by_name or by_dtype


@functools.lru_cache(maxsize=65536)  # a rank's measurements ask for the same names, often long
def kernel_precision(name: str) -> str:
    """Precision class (PRECISIONS, or fp64 / int8, which only kernel names tell) a GEMM /
    conv / attention kernel runs in, from its name; "" when the name does not say."""
    name = str(name)
    tensile = _TENSILE_RE.match(name)
    if tensile:
        code = tensile.group(1)
        return _TENSILE_TYPES.get(code[:2], _TENSILE_TYPES.get(code[:1], ""))
    return next((p for p, rx in _KERNEL_PRECISION if rx.search(name)), "")
