"""Bytes an op moves in device memory, and the FLOPs of ops outside the matmul formulas, from
their recorded shapes (``Input Dims``) and dtypes (``Input type``).

The bytes are the op's **compulsory** traffic: every tensor input read once, every output
written once, in the dtypes recorded. Real kernels move more where they re-read data that
does not stay in cache (GEMM tiles, a LayerNorm's second pass over a row) and less where an
input is one tensor passed twice (``y * y``: the trace does not say two inputs alias). The
roofline (analyzers/measure/roofline.py, docs/roofline.md) reads them; they are checked
against Nsight Compute's DRAM bytes in tests/analyzers/test_roofline_ground_truth.py.

An input whose ``Input Strides`` hold zeros is a broadcast view (``expand``): only the
elements behind its non-zero strides are read. Outputs are not recorded, so each family of
ops states its own:

- matrix products, convolutions, attention: the output their FLOPs imply (mm: M x N from
  2MNK, conv: N x Cout x output positions); backward ops write a gradient per input.
- elementwise (unary, binary, ternary, activations, comparisons, casts): the broadcast shape
  of the inputs in the widest input dtype (bool for comparisons); in-place ops write their
  first input. One vector FLOP per output element, :data:`TRANSCENDENTAL_FLOPS` for
  transcendental functions (ncu counts 13-21 FP32 instructions per element in PyTorch's
  GELU, tanh and SiLU kernels).
- norms and softmax: an output the size of the first input, :data:`NORM_FLOPS` per element;
  reductions: the reduced shape (``dim`` from ``Concrete Inputs``; a full reduction writes
  one element).
- copies (copy_, _to_copy, cat, clone): the input read, the same elements written in the
  output's dtype.
- gather / scatter / index / embedding: the indices and the gathered (or scattered) rows,
  not the whole source table; scatters read and write the rows they update.
- foreach ops and fused optimizers: every tensor of every list read, the updated lists
  written (a list's dtype is not recorded: the op's plain tensors', else fp32).
- Inductor's Triton kernels (``triton_poi_`` / ``triton_red_`` / ``triton_per_``), which
  record their tensor arguments: each argument moved once (all counted as reads: which
  arguments are outputs is not recorded).

Every other op (custom ops, sorts, Triton GEMM templates) has no cost: NaN.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import orjson

from profkit.classify.opfamilies import (
    COMPARISON,
    CONV_BWD,
    FUSED_OPTIMIZER,
    SCAN,
    TRANSCENDENTAL,
    base_name,
    op_family,
)

NAN = math.nan
TRANSCENDENTAL_FLOPS = 16.0
NORM_FLOPS = 16.0
OPTIMIZER_FLOPS = 16.0
LIST_ITEMSIZE = 4  # a TensorList's dtype is not recorded: fp32 (optimizer states, masters)

# Element sizes of the dtypes as the profiler writes them in "Input type" (lower-cased).
ITEMSIZE = {
    "float": 4, "double": 8, "c10::half": 2, "c10::bfloat16": 2, "half": 2, "bfloat16": 2,
    "long int": 8, "long": 8, "int": 4, "unsigned int": 4, "long unsigned int": 8,
    "short int": 2, "short": 2, "unsigned char": 1, "signed char": 1, "char": 1, "bool": 1,
    "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1, "c10::float8_e4m3fnuz": 1,
    "c10::float8_e5m2fnuz": 1, "c10::float4_e2m1fn_x2": 1, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::complex<c10::half>": 4,
}
# torch.ScalarType codes (a _to_copy's dtype argument in Concrete Inputs) -> element size.
SCALAR_TYPE_SIZE = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 8: 4, 9: 8, 10: 16,
                    11: 1, 15: 2, 23: 1, 24: 1, 25: 1, 26: 1}


class Tensor(NamedTuple):
    numel: int
    itemsize: int
    shape: tuple
    stored: int = -1  # elements behind a broadcast view (zero strides); -1: numel

    @property
    def nbytes(self) -> float:
        """Bytes read: the stored elements of a broadcast view, else every element."""
        return float((self.numel if self.stored < 0 else self.stored) * self.itemsize)


class Cost(NamedTuple):
    """What one op moves and computes: bytes read, bytes written, vector FLOPs."""

    read: float
    write: float
    flops: float


UNKNOWN = Cost(NAN, NAN, NAN)


# where a reduction's ``dim`` argument sits (default 1; 99: none, it reduces everything)
REDUCED_DIM_ARG = {"norm": 2, "linalg_vector_norm": 2, "mse_loss": 99, "l1_loss": 99,
                   "smooth_l1_loss": 99, "binary_cross_entropy": 99}


def tensors(dims: object, types: object, strides: object = None) -> list:
    """Each argument as a :class:`Tensor`, a list of them (TensorList), or None (a scalar,
    a list of ints, an unknown dtype)."""
    if not isinstance(dims, list) or not isinstance(types, list):
        return []
    plain = [ITEMSIZE.get(str(t).lower()) for t in types]
    list_size = next((s for s, d in zip(plain, dims) if s and d), LIST_ITEMSIZE)
    strides = strides if isinstance(strides, list) and len(strides) == len(dims) else [None] * len(dims)
    out: list = []
    for d, t, size, st in zip(dims, types, plain, strides):
        if size and _is_shape(d):
            out.append(Tensor(math.prod(d), size, tuple(d), _stored(d, st)))
        elif str(t) == "TensorList" and isinstance(d, list) and all(map(_is_shape, d)):
            out.append([Tensor(math.prod(x), list_size, tuple(x)) for x in d])  # [] if unrecorded
        else:
            out.append(None)
    return out


def _stored(dims: list, strides: object) -> int:
    """Elements behind a view with zero strides (broadcast); -1 when none is zero."""
    if not _is_shape(strides) or len(strides) != len(dims) or 0 not in strides:
        return -1
    return math.prod(n for n, s in zip(dims, strides) if s != 0)


def _is_shape(d: object) -> bool:
    return isinstance(d, list) and all(isinstance(x, int) and x >= 0 for x in d)


def _flat(args: list) -> list[Tensor]:
    return [t for a in args if a is not None for t in (a if isinstance(a, list) else [a])]


def _bytes(ts: list[Tensor]) -> float:
    return float(sum(t.nbytes for t in ts))


def _concrete(concrete: object, i: int) -> object:
    if not isinstance(concrete, list) or i >= len(concrete) or not isinstance(concrete[i], str):
        return None
    try:
        return orjson.loads(concrete[i].replace("True", "true").replace("False", "false"))
    except orjson.JSONDecodeError:
        return None


def op_cost(name: str, dims: object, types: object, concrete: object = None,
            flops: float = NAN, strides: object = None) -> Cost:
    """Bytes read and written and vector FLOPs of one op (module doc); :data:`UNKNOWN` when
    the op has no formula or its shapes do not fit it. ``flops``: the op's matmul / conv /
    attention FLOPs from its shapes, which give its output size; ``strides``: its
    ``Input Strides``. Shapes no formula foresaw (33 dimensions, past numpy's broadcast)
    raise: the caller drops this op's cost and counts it."""
    family = op_family(name)
    if not family:
        return UNKNOWN
    args = tensors(dims, types, strides)
    ts = _flat(args)
    if not ts:
        return UNKNOWN
    try:
        return _FORMULAS[family](base_name(name), args, ts, concrete, flops)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError,
            OverflowError):
        return UNKNOWN


def _matmul(base, args, ts, concrete, flops) -> Cost:
    """Output M x N (x batch) = FLOPs / 2K, K the first operand's last dimension."""
    name, _ = base
    first = ts[1] if name in ("addmm", "baddbmm", "_addmm_activation") else ts[0]
    if not math.isfinite(flops) or not first.shape:
        return UNKNOWN
    out = flops / (2.0 * first.shape[-1])
    return Cost(_bytes(ts), out * first.itemsize, 0.0)


def _conv(base, args, ts, concrete, flops) -> Cost:
    name, _ = base
    if name in CONV_BWD:  # write a gradient for the input and for the weight
        _, inp, weight = (args[i] for i in CONV_BWD[name])
        return Cost(_bytes(ts), inp.nbytes + weight.nbytes, 0.0)
    if name.endswith("backward_input"):
        return Cost(_bytes(ts), NAN, 0.0)
    x, w = ts[0], ts[1]
    if math.isfinite(flops) and "transpose" not in name:
        out = flops / (2.0 * math.prod(w.shape[1:]))  # N x Cout x output positions
    else:  # output positions unknown: taken as the input's (stride 1, same padding)
        out = x.numel / x.shape[1] * (w.shape[1] if "transpose" in name else w.shape[0])
    return Cost(_bytes(ts), out * x.itemsize, 0.0)


def _attention(base, args, ts, concrete, flops) -> Cost:
    name, _ = base
    if name.endswith("backward"):  # grad_out, q, k, v, ...: write dq, dk, dv
        return Cost(_bytes(ts), _bytes(ts[1:4]), 0.0)
    q, _, v = ts[:3]
    return Cost(_bytes(ts), q.numel / q.shape[-1] * v.shape[-1] * q.itemsize, 0.0)


def _broadcast(ts: list[Tensor]) -> int:
    return int(np.prod(np.broadcast_shapes(*(t.shape for t in ts))))


def _elementwise(base, args, ts, concrete, flops) -> Cost:
    name, inplace = base
    wide = [t for t in ts if t.numel > 1] or ts
    if inplace:
        out, size = ts[0].numel, ts[0].itemsize
    else:
        out = _broadcast(ts)
        size = 1 if name in COMPARISON else max(t.itemsize for t in wide)
    per = TRANSCENDENTAL_FLOPS if name in TRANSCENDENTAL else 1.0
    return Cost(_bytes(ts), float(out * size), per * out)


def _norm(base, args, ts, concrete, flops) -> Cost:
    x = ts[0]  # the input (forward) or the output gradient (backward): same size
    params = sum(t.nbytes for t in ts[1:] if t.numel < x.numel) if "backward" in base[0] else 0
    return Cost(_bytes(ts), x.nbytes + params, NORM_FLOPS * x.numel)


def _softmax(base, args, ts, concrete, flops) -> Cost:
    return Cost(_bytes(ts), ts[0].nbytes, NORM_FLOPS * ts[0].numel)


def _reduction(base, args, ts, concrete, flops) -> Cost:
    name, _ = base
    x = ts[0]
    if name == "_foreach_norm":
        return Cost(_bytes(ts), 4.0 * len(args[0] or []), float(sum(t.numel for t in ts)))
    dim = _concrete(concrete, REDUCED_DIM_ARG.get(name, 1))
    dims = [dim] if isinstance(dim, int) and not isinstance(dim, bool) else dim
    if isinstance(dims, list) and dims and all(isinstance(d, int) for d in dims) and x.shape:
        out = x.numel / math.prod(x.shape[d] for d in dims) if x.numel else 0
    else:
        out = 1
    return Cost(_bytes(ts), float(out * x.itemsize), float(x.numel))


def _copy(base, args, ts, concrete, flops) -> Cost:
    name, _ = base
    if name in ("copy", "_foreach_copy"):  # (dst, src): read src, write dst
        src, dst = _flat(args[1:2]), _flat(args[:1])
        return Cost(_bytes(src), _bytes(dst), 0.0)
    if name == "_to_copy":
        size = SCALAR_TYPE_SIZE.get(_concrete(concrete, 1), ts[0].itemsize)
        return Cost(ts[0].nbytes, float(ts[0].numel * size), 0.0)
    if name in SCAN:
        return Cost(ts[0].nbytes, ts[0].nbytes, float(ts[0].numel))
    moved = _bytes(_flat(args[:1]))  # the input, or the list cat / stack joins
    return Cost(moved, moved, 0.0)


def _fill(base, args, ts, concrete, flops) -> Cost:
    return Cost(0.0, ts[0].nbytes, float(ts[0].numel))


def _index(base, args, ts, concrete, flops) -> Cost:
    """The indices and the rows they pick: read + write of the gathered / updated part."""
    name, inplace = base
    a = args + [None] * 4
    if name == "embedding":  # (weight, indices): rows of the table
        w, idx = a[0], a[1]
        rows = idx.numel * w.numel / w.shape[0] * w.itemsize
        return Cost(idx.nbytes + rows, rows, 0.0)
    if name == "embedding_dense_backward":  # (grad, indices, num_weights, ...)
        grad, idx, rows = a[0], a[1], _concrete(concrete, 2)
        if not isinstance(rows, (int, float)):  # a list times numel would be a huge list
            return UNKNOWN
        table = rows * grad.numel / max(idx.numel, 1) * grad.itemsize
        return Cost(grad.nbytes + idx.nbytes, table, float(grad.numel))
    if name == "index_select":  # (self, dim, index)
        x, idx, dim = a[0], a[2], _concrete(concrete, 1)
        rows = x.numel / x.shape[dim] * idx.numel * x.itemsize
        return Cost(idx.nbytes + rows, rows, 0.0)
    if name == "gather":  # (self, dim, index): the output has the index's shape
        x, idx = a[0], a[2]
        return Cost(idx.nbytes + idx.numel * x.itemsize, idx.numel * x.itemsize, 0.0)
    if name in ("scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy"):
        x, idx, src = a[0], a[2], a[3]  # (self, dim, index, src)
        return _scatter(x, idx.nbytes, src, inplace)
    if name in ("index_put", "_index_put_impl"):  # (self, indices, values, accumulate)
        return _scatter(a[0], _bytes(_flat([a[1]])), a[2], inplace)
    if name == "index":  # (self, indices): indices on the leading dimensions
        x, idx = a[0], _flat([a[1]])
        rows = idx[0].numel * math.prod(x.shape[len(idx):]) * x.itemsize
        return Cost(_bytes(idx) + rows, rows, 0.0)
    if name in ("nll_loss_forward", "nll_loss2d_forward"):  # (self, target, ...)
        target = a[1]
        return Cost(target.nbytes + target.numel * a[0].itemsize, 8.0, float(target.numel))
    if name in ("nll_loss_backward", "nll_loss2d_backward"):  # (grad, self, target, ...)
        return Cost(a[2].nbytes, a[1].nbytes, float(a[2].numel))
    if name == "index_fill":  # (self, dim, index, value)
        x, idx, dim = a[0], a[2], _concrete(concrete, 1)
        return Cost(idx.nbytes, x.numel / x.shape[dim] * idx.numel * x.itemsize, 0.0)
    return UNKNOWN


def _scatter(x: Tensor, index_bytes: float, src: Tensor, inplace: bool) -> Cost:
    """Read the indices and the source, read-modify-write the rows updated; an out-of-place
    scatter first copies its target."""
    rows = src.numel * x.itemsize
    copy = 0.0 if inplace else x.nbytes
    return Cost(index_bytes + src.nbytes + rows + copy, rows + copy, float(src.numel))


def _foreach(base, args, ts, concrete, flops) -> Cost:
    written = _bytes(_flat(args[:1]))  # the first list (in place), or the new list
    return Cost(_bytes(ts), written, float(sum(t.numel for t in _flat(args[:1]))))


def _optimizer(base, args, ts, concrete, flops) -> Cost:
    lists = [a for a in args if isinstance(a, list)]
    written = _bytes(_flat([lists[i] for i in FUSED_OPTIMIZER[base[0]] if i < len(lists)]))
    read = _bytes(_flat(lists[:5]))
    return Cost(read, written, OPTIMIZER_FLOPS * sum(t.numel for t in _flat(lists[:1])))


def _triton(base, args, ts, concrete, flops) -> Cost:
    """Inductor kernels: each tensor argument moved once. Which arguments are outputs is not
    recorded: all count as read."""
    return Cost(_bytes(ts), 0.0, float(max(t.numel for t in ts)))


_FORMULAS = {"matmul": _matmul, "conv": _conv, "attention": _attention,
             "elementwise": _elementwise, "norm": _norm, "softmax": _softmax,
             "reduction": _reduction, "copy": _copy, "fill": _fill, "index": _index,
             "foreach": _foreach, "optimizer": _optimizer, "triton": _triton}
