"""FLOPs of matrix-multiply and attention ops from their recorded input shapes.

PyTorch's profiler no longer writes FLOP counts into exported traces (seen with torch 2.11
and with_flops=True), but with record_shapes it writes each op's ``Input Dims``. These
formulas count multiply-adds as 2 FLOPs, the usual convention for MFU:

- ``aten::mm`` [M,K]x[K,N]: 2MNK; ``aten::addmm`` (bias, [M,K], [K,N]): 2MNK;
  ``aten::bmm`` [B,M,K]x[B,K,N]: 2BMNK; ``aten::baddbmm`` (bias, [B,M,K], [B,K,N]): 2BMNK;
  ``aten::_scaled_mm`` as mm (fp8).
- Scaled-dot-product attention forward, q [B,H,S,D] and k [B,H,Sk,D]: two matmuls,
  4*B*H*S*Sk*D; backward: 2.5x the forward (two matmuls for the gradients of each input plus
  the recomputed scores). Causal masking is not visible in the shapes, so attention is counted
  as non-causal: an upper bound, about 2x for causal training.

Only these leaf ops carry FLOPs (they do not call one another), so summing them does not
double count ``aten::linear`` / ``aten::matmul`` wrappers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

Dims = list


def _prod(shape: Dims) -> int:
    return math.prod(int(x) for x in shape)


def _mm(d: Dims) -> float:
    (m, k), (_, n) = d[0], d[1]
    return 2.0 * m * n * k


def _addmm(d: Dims) -> float:
    return _mm(d[1:3])


def _bmm(d: Dims) -> float:
    (b, m, k), (_, _, n) = d[0], d[1]
    return 2.0 * b * m * n * k


def _baddbmm(d: Dims) -> float:
    return _bmm(d[1:3])


def _attention(d: Dims) -> float:
    (b, h, s, dim), k = d[0], d[1]
    return 4.0 * b * h * s * int(k[-2]) * dim


def _attention_backward(d: Dims) -> float:
    # (grad_out, query, key, value, ...): shapes of query and key follow the gradient.
    return 2.5 * _attention(d[1:3])


FLOP_OPS: dict[str, Callable[[Dims], float]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::_scaled_mm": _mm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::_scaled_dot_product_flash_attention": _attention,
    "aten::_scaled_dot_product_efficient_attention": _attention,
    "aten::_scaled_dot_product_cudnn_attention": _attention,
    "aten::_flash_attention_forward": _attention,
    "aten::_scaled_dot_product_flash_attention_backward": _attention_backward,
    "aten::_scaled_dot_product_efficient_attention_backward": _attention_backward,
    "aten::_scaled_dot_product_cudnn_attention_backward": _attention_backward,
    "aten::_flash_attention_backward": _attention_backward,
}


def flops_from_shapes(name: str, dims: object) -> float:
    """FLOPs of one op from its ``Input Dims``; NaN when the op or shapes are not known."""
    fn = FLOP_OPS.get(name)
    if fn is None or not isinstance(dims, list):
        return math.nan
    try:
        return float(fn(dims))
    except (TypeError, ValueError, IndexError):
        return math.nan
