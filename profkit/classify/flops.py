"""FLOPs of recorded ops from their shapes, and the precision a GEMM ran in.

PyTorch's profiler no longer writes FLOP counts into exported traces (seen with torch 2.11
and with_flops=True), but with record_shapes it writes each op's ``Input Dims`` and, since
about 2.1, ``Concrete Inputs`` (the values of scalar and list arguments: stride, padding,
is_causal, output_mask). A multiply-add counts as 2 FLOPs, the usual convention for MFU
(so ResNet-50's "4.1 GFLOPs" of multiply-adds per image are 8.2 GFLOP here).

- Matrix products: ``mm`` [M,K]x[K,N] 2MNK; ``addmm`` / ``_addmm_activation`` (bias, [M,K],
  [K,N]); ``bmm`` / ``baddbmm`` 2BMNK; ``_scaled_mm`` (fp8) as mm; ``matmul`` with
  broadcasting; ``linear`` (input [..., K], weight [N, K]) 2 x rows x N x K.
- Convolutions (conv1d/2d/3d, convolution, _convolution, cudnn / miopen / mkldnn variants):
  2 x N x output positions x prod(weight) (weight [Cout, Cin/groups, k...], so groups need
  no special case); transposed: 2 x prod(input) x prod(weight[1:]). The output size needs
  stride / padding / dilation from ``Concrete Inputs``; older traces lack them, and then the
  output size is read from the conv's backward node (same ``Sequence number``, whose input
  is the gradient of the output): see :class:`ConvLinks`.
- Convolution backward: the forward's work once per gradient computed (``output_mask``: input
  and weight; the bias gradient is a reduction). Without a recorded mask, the gradients are
  counted from the ``*_backward_input`` / ``*_backward_weight`` ops nested inside (old
  traces), else both are assumed.
- Attention (scaled_dot_product_attention and its flash / efficient / cudnn / cpu kernels,
  ``_flash_attention_*``, ``_efficient_attention_*``, ``_cudnn_attention_*``): q·kᵀ and p·v, 2 x B x H x S x Sk x
  (D + Dv); backward 2.5x the forward (five products instead of two). Causal masking
  (``is_causal``, or a non-zero ``custom_mask_type``) with as many queries as keys does
  (S + 1) / 2S of the work; other causal shapes are counted in full (an upper bound).

Wrappers and the ops they call both carry FLOPs (``aten::linear`` holds ``aten::addmm``,
``aten::conv2d`` holds ``aten::cudnn_convolution``): the efficiency analyzer counts only the
outermost op carrying FLOPs on each thread, so nothing is counted twice and a wrapper still
counts where its inner op was not recorded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import orjson

# the precision a kernel ran in lives in precision.py; imported here for its callers
from profkit.classify.precision import (  # noqa: F401
    HALF_WIDTH,
    PRECISIONS,
    SCALED_GEMMS,
    SIXTEEN_BIT,
    dtype_precision,
    kernel_precision,
    refine_precision,
)
from profkit.classify.shapes import readable_dims

Dims = list
Formula = Callable[[Dims, list], float]

# --- op formulas ------------------------------------------------------------------------

def _prod(shape) -> int:
    return math.prod(int(x) for x in shape)


def _mm(d: Dims, c: list) -> float:
    (m, k), (_, n) = d[0], d[1]
    return 2.0 * m * n * k


def _addmm(d: Dims, c: list) -> float:
    return _mm(d[1:3], c)


def _bmm(d: Dims, c: list) -> float:
    (b, m, k), (_, _, n) = d[0], d[1]
    return 2.0 * b * m * n * k


def _baddbmm(d: Dims, c: list) -> float:
    return _bmm(d[1:3], c)


def _matmul(d: Dims, c: list) -> float:
    """torch.matmul: 1-D operands act as a row / column; leading dimensions broadcast."""
    a, b = list(d[0]), list(d[1])
    if not a or not b:
        raise ValueError("scalar operand")
    a = [1] + a if len(a) == 1 else a
    b = b + [1] if len(b) == 1 else b
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return 2.0 * _prod(batch) * a[-2] * a[-1] * b[-1]


def _linear(d: Dims, c: list) -> float:
    x, w = d[0], d[1]
    return 2.0 * _prod(x[:-1]) * w[0] * w[1]


def _concrete(c: list, i: int) -> object:
    """The value of argument ``i`` from ``Concrete Inputs`` (JSON-ish text), or None."""
    if i >= len(c) or not isinstance(c[i], str) or not c[i].strip():
        return None
    text = c[i].strip().replace("True", "true").replace("False", "false")
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # a string argument: conv padding "same" / "valid"


def _spatial(value: object, n: int) -> list[int]:
    """A stride / padding / dilation argument as one int per spatial dimension."""
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) for v in values) or not values:
        raise ValueError(f"not a list of ints: {value!r}")
    return values * n if len(values) == 1 else values


def conv_work(x: Dims, w: Dims, out_spatial: list[int]) -> float:
    """Forward FLOPs of a (non-transposed) convolution with this output size."""
    if len(out_spatial) != len(x) - 2 or len(w) != len(x):
        raise ValueError("input, weight and output ranks disagree")
    return 2.0 * x[0] * _prod(out_spatial) * _prod(w)


def _conv_out(x: Dims, w: Dims, stride, padding, dilation) -> list[int]:
    n = len(x) - 2
    if padding == "valid":
        padding = 0
    if padding == "same":
        return list(x[2:])
    s, p, dl = _spatial(stride, n), _spatial(padding, n), _spatial(dilation, n)
    return [(i + 2 * pi - di * (k - 1) - 1) // si + 1
            for i, k, si, pi, di in zip(x[2:], w[2:], s, p, dl)]


def _transposed_work(x: Dims, w: Dims) -> float:
    # Every input element meets Cout/groups x kernel weights: 2 x prod(input) x prod(w[1:]).
    return 2.0 * _prod(x) * _prod(w[1:])


def _conv_forward(stride: int, padding: int, dilation: int, transposed: int | None) -> Formula:
    """A forward convolution whose (stride, padding, dilation, transposed) arguments sit at
    these positions (transposed None: not an argument of this op)."""

    def formula(d: Dims, c: list) -> float:
        x, w = d[0], d[1]
        if transposed is not None and _concrete(c, transposed) is True:
            return _transposed_work(x, w)
        args = [_concrete(c, i) for i in (stride, padding, dilation)]
        if any(a is None for a in args):
            raise ValueError("no Concrete Inputs: output size unknown")
        return conv_work(x, w, _conv_out(x, w, *args))

    return formula


def _conv_transpose(d: Dims, c: list) -> float:
    return _transposed_work(d[0], d[1])


def _conv_backward(grad_out: int, inp: int, weight: int, transposed: int | None,
                   mask: int | None) -> Formula:
    """A convolution backward: the forward's work once per gradient of ``output_mask``."""

    def formula(d: Dims, c: list) -> float:
        w = d[weight]
        if transposed is not None and _concrete(c, transposed) is True:
            work = _transposed_work(d[inp], w)
        else:
            work = 2.0 * _prod(d[grad_out]) * _prod(w[1:])
        flags = _concrete(c, mask) if mask is not None else None
        return work * (sum(bool(f) for f in flags[:2]) if isinstance(flags, list) else 2)

    return formula


def _backward_input(d: Dims, c: list) -> float:
    return 2.0 * _prod(d[1]) * _prod(d[2][1:])  # (input size, grad_output, weight)


def _causal_factor(s: int, sk: int, causal: object) -> float:
    masked = isinstance(causal, int) and causal > 0  # True, or a causal custom_mask_type
    return (s + 1) / (2 * s) if masked and s == sk and s else 1.0


def _attention(layout: str, causal_arg: int | None, backward: bool) -> Formula:
    """Attention over q, k, v laid out as "bhsd" ([..., S, D]) or "bshd" ([B, S, H, D])."""
    first = 1 if backward else 0  # backward ops take grad_out first

    def formula(d: Dims, c: list) -> float:
        q, k, v = d[first], d[first + 1], d[first + 2]
        if layout == "bshd":
            if len(q) != 4:
                raise ValueError("variable-length (packed) attention: lengths unknown")
            rows, s, sk = q[0] * q[1] * q[2], q[1], k[1]
        else:
            rows, s, sk = _prod(q[:-1]), q[-2], k[-2]
        causal = _concrete(c, causal_arg) if causal_arg is not None else None
        work = 2.0 * rows * sk * (q[-1] + v[-1]) * _causal_factor(s, sk, causal)
        return 2.5 * work if backward else work

    return formula


FLOP_OPS: dict[str, Formula] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::_addmm_activation": _addmm,
    "aten::_scaled_mm": _mm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul,
    "aten::linear": _linear,
    "aten::conv1d": _conv_forward(3, 4, 5, None),
    "aten::conv2d": _conv_forward(3, 4, 5, None),
    "aten::conv3d": _conv_forward(3, 4, 5, None),
    "aten::convolution": _conv_forward(3, 4, 5, 6),
    "aten::_convolution": _conv_forward(3, 4, 5, 6),
    "aten::cudnn_convolution": _conv_forward(3, 2, 4, None),
    "aten::miopen_convolution": _conv_forward(4, 3, 5, None),
    "aten::miopen_depthwise_convolution": _conv_forward(4, 3, 5, None),
    "aten::mkldnn_convolution": _conv_forward(4, 3, 5, None),
    "aten::conv_transpose1d": _conv_transpose,
    "aten::conv_transpose2d": _conv_transpose,
    "aten::conv_transpose3d": _conv_transpose,
    "aten::cudnn_convolution_transpose": _conv_transpose,
    "aten::miopen_convolution_transpose": _conv_transpose,
    "aten::convolution_backward": _conv_backward(0, 1, 2, 7, 10),
    "aten::cudnn_convolution_backward": _conv_backward(1, 0, 2, None, 10),
    "aten::miopen_convolution_backward": _conv_backward(1, 0, 2, None, 9),
    "aten::cudnn_convolution_backward_input": _backward_input,
    "aten::miopen_convolution_backward_input": _backward_input,
    "aten::scaled_dot_product_attention": _attention("bhsd", 5, False),
    "aten::_scaled_dot_product_flash_attention": _attention("bhsd", 4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _attention("bhsd", 4, False),
    "aten::_scaled_dot_product_efficient_attention": _attention("bhsd", 6, False),
    "aten::_scaled_dot_product_cudnn_attention": _attention("bhsd", 6, False),
    "aten::_flash_attention_forward": _attention("bshd", 8, False),
    "aten::_efficient_attention_forward": _attention("bshd", 9, False),
    "aten::_cudnn_attention_forward": _attention("bhsd", 10, False),
    "aten::_scaled_dot_product_flash_attention_backward": _attention("bhsd", 11, True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _attention("bhsd", 7, True),
    "aten::_scaled_dot_product_efficient_attention_backward": _attention("bhsd", 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": _attention("bhsd", 14, True),
    "aten::_flash_attention_backward": _attention("bshd", 11, True),
    "aten::_efficient_attention_backward": _attention("bshd", 14, True),
    "aten::_cudnn_attention_backward": _attention("bhsd", 14, True),
}


MAX_OP_FLOPS = 1e22  # a day (the longest event kept) at 10 PFLOP/s, past every device peak


def plausible_flops(value: float) -> bool:
    """Whether ``value`` can be one op's FLOP count: 0 to MAX_OP_FLOPS (not NaN or inf)."""
    return 0.0 <= value <= MAX_OP_FLOPS


def shape_flops(name: str, dims: object, concrete: object = None) -> tuple[float, bool]:
    """(FLOPs, dropped) of one op from its shapes: NaN when the op, its shapes or arguments
    are unknown; NaN and dropped when they give no count an op can have (2**62-sized
    dimensions overflow a float, a stride of 0, negative or absurd counts) or are no shapes
    (:func:`readable_dims`)."""
    fn = FLOP_OPS.get(name)
    if fn is None or not isinstance(dims, list):
        return math.nan, False
    if not readable_dims(dims):
        return math.nan, True
    try:
        value = float(fn(dims, concrete if isinstance(concrete, list) else []))
    except (TypeError, ValueError, IndexError, AttributeError):
        return math.nan, False
    except Exception:  # overflow, and what else hostile shapes raise (numpy broadcasts at
        return math.nan, True  # most 32 dimensions): this op's FLOPs go, never its rank
    return (value, False) if plausible_flops(value) else (math.nan, True)


def flops_from_shapes(name: str, dims: object, concrete: object = None) -> float:
    """FLOPs of one op from its shapes (:func:`shape_flops`), NaN when unknown or dropped."""
    return shape_flops(name, dims, concrete)[0]


# --- links between convolution events (traces without Concrete Inputs) ---------------------
_FORWARD_CONVS = frozenset(("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                            "aten::_convolution", "aten::cudnn_convolution",
                            "aten::miopen_convolution", "aten::miopen_depthwise_convolution",
                            "aten::mkldnn_convolution"))
_MASKED_BACKWARD = {"aten::convolution_backward": 10, "aten::cudnn_convolution_backward": 10,
                    "aten::miopen_convolution_backward": 9}  # op -> output_mask position
_GRADIENT_LEAVES = frozenset(f"aten::{lib}convolution_backward_{part}" for part in
                             ("input", "weight") for lib in ("cudnn_", "miopen_",
                                                             "miopen_depthwise_"))
_NODE_RE = re.compile(r"Conv\w*Backward\d*$")  # autograd nodes: ConvolutionBackward0, ...


class ConvLinks:
    """Convolution FLOPs that need a second event of the trace, for traces without
    ``Concrete Inputs`` (PyTorch < ~2.1):

    - a forward conv's output size is its backward node's input (the output gradient), the
      node found by the forward op's ``Sequence number``;
    - a conv backward op without a recorded ``output_mask`` computes the gradients whose
      ``*_backward_input`` / ``*_backward_weight`` ops run nested inside it.

    :meth:`note` is called as events are read; :meth:`resolve` once all are."""

    def __init__(self) -> None:
        self.forward: list[tuple[int, list, int]] = []  # (row, dims, sequence number)
        self.grad_out: dict[int, list] = {}  # sequence number -> output gradient dims
        self.backward: list[tuple[int, float]] = []  # (row, FLOPs of one gradient)
        self.leaves: list[int] = []
        self.dropped = 0  # forward convs whose linked shapes give no plausible count
        self._wanted: dict[str, bool] = {}
        self._links: dict[str, bool] = {}

    def wants(self, name: str) -> bool:
        """Whether ``name`` is an op with a FLOP formula or a link (memoised per name)."""
        hit = self._wanted.get(name)
        if hit is None:
            hit = self._wanted[name] = (name in FLOP_OPS or name in _GRADIENT_LEAVES
                                        or bool(_NODE_RE.search(name)))
        return hit

    def links(self, name: str) -> bool:
        """Whether :meth:`note` can keep anything of an op named ``name`` (memoised per
        name): only these ops' shapes need to be kept for it, and noted."""
        hit = self._links.get(name)
        if hit is None:
            hit = self._links[name] = (
                name in _GRADIENT_LEAVES or name in _FORWARD_CONVS or name in _MASKED_BACKWARD
                or (bool(_NODE_RE.search(name)) and "Transpose" not in name))
        return hit

    def note(self, row: int, name: str, dims: object, concrete: object, seq: object,
             flops: float) -> None:
        if not isinstance(dims, list):
            return
        if name in _GRADIENT_LEAVES:
            self.leaves.append(row)
        elif name in _FORWARD_CONVS and math.isnan(flops) and isinstance(seq, int):
            self.forward.append((row, dims, seq))
        elif name in _MASKED_BACKWARD and not math.isnan(flops):
            if _concrete(concrete if isinstance(concrete, list) else [],
                         _MASKED_BACKWARD[name]) is None:
                self.backward.append((row, flops / 2))
        elif _NODE_RE.search(name) and "Transpose" not in name and isinstance(seq, int) and dims:
            self.grad_out[seq] = dims[0]

    def resolve(self, flops: np.ndarray, ts: np.ndarray, end: np.ndarray,
                tid: np.ndarray) -> None:
        """Fill ``flops`` (indexed by row) from the links; ``ts`` / ``end`` / ``tid`` of
        every row, in any one time unit."""
        for row, dims, seq in self.forward:
            grad = self.grad_out.get(seq)
            try:  # the gradient must be [N, Cout, ...] of this very conv
                if grad[:2] != [dims[0][0], dims[1][0]]:
                    continue
                work = conv_work(dims[0], dims[1], grad[2:])
            except (TypeError, ValueError, IndexError):
                continue
            except Exception:  # overflow, or any other failure on hostile shapes: dropped
                work = math.nan
            if plausible_flops(work):
                flops[row] = work
            else:
                self.dropped += 1
        leaves = np.asarray(self.leaves, dtype=np.int64)
        for row, one in self.backward:
            inside = leaves[(tid[leaves] == tid[row]) & (ts[leaves] >= ts[row])
                            & (ts[leaves] <= end[row])]
            if len(inside):
                flops[row] = one * min(len(inside), 2)
