"""What one rank's used steps were, in the terms an optimization leaves alone: the model's
parameter shapes, the input at the step boundary, the user's annotations and module names.

A compile, a fusion, another precision or attention implementation, CUDA graphs or
DataLoader workers change which kernels and CPU ops run, not these; a different model or
batch changes them. ``profkit diff`` (:mod:`profkit.analyzers.compare.workload`) reads them
to tell the two apart. They come from what the trace holds:

- **param**: the weight shapes of the module ops that take weights (``aten::linear``'s
  weight and bias, a convolution's weight, an embedding's table, a norm's affine weights),
  from the ops' recorded ``Input Dims`` (``record_shapes=True``); eager ops only, so a
  compiled model or a CUDA-graph replay shows none;
- **input**: per used step, the activation going into the first of those ops (the model's
  input: token ids ``8x512``, images ``64x3x160x160``);
- **first**: per used step, the first tensor shape any CPU op of the step received (what
  the step starts from when the model's ops are hidden);
- **annotation**: ``record_function`` ranges (``user_annotation``) other than ProfilerStep;
- **module**: ``nn.Module: Name_N`` ranges (``with_stack=True``);
- **recompute**: weight ops that ran inside the backward pass (within an
  ``autograd::engine::evaluate_function`` range of their thread): activation checkpointing
  running a forward again; counted here, never as parameter shapes (a checkpointed model
  has the blocks it had, not twice as many).

Table ``used_step_shapes``: rank, role, step (the used step for input / first, -1 for
counts summed over the used steps), name (the op, annotation or module), shape (``AxBxC``;
"" for annotations and modules), count.
"""

from __future__ import annotations

import re

import numpy as np
import orjson
import pandas as pd

from profkit import schema as S
from profkit.columns import category_mask, unique_rows, values_in
from profkit.trace.ingest import STEP_PREFIX

SIGNATURE_COLUMNS = ("rank", "role", S.STEP, S.NAME, "shape", "count")
PARAM, INPUT, FIRST, ANNOTATION, MODULE = "param", "input", "first", "annotation", "module"
RECOMPUTE = "recompute"
BACKWARD_RANGE_RE = r"^autograd::engine::evaluate_function"
MODULE_PREFIX = "nn.Module: "
OP_COLUMNS = (S.TID, S.NAME, S.TS_NS, S.DUR_NS, S.STEP, S.INPUT_DIMS)  # what the op parts read
# Module ops that take weights: (argument indexes holding weights, index of the activation)
WEIGHT_OPS = {
    "aten::linear": ((1, 2), 0),
    "aten::conv1d": ((1, 2), 0), "aten::conv2d": ((1, 2), 0), "aten::conv3d": ((1, 2), 0),
    "aten::conv_transpose1d": ((1, 2), 0), "aten::conv_transpose2d": ((1, 2), 0),
    "aten::conv_transpose3d": ((1, 2), 0),
    "aten::embedding": ((0,), 1), "aten::embedding_bag": ((0,), 1),
    "aten::layer_norm": ((2, 3), 0), "aten::group_norm": ((2, 3), 0),
    "aten::batch_norm": ((1, 2), 0), "aten::instance_norm": ((1, 2), 0),
    "aten::rms_norm": ((2,), 0),
}


def shape_text(dims: object) -> str:
    """``[8, 512]`` -> ``8x512``; "" for anything but a non-empty list of whole numbers."""
    if not isinstance(dims, list) or not dims or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in dims):
        return ""
    return "x".join(map(str, dims))


def _parsed(categories) -> list:
    """Each distinct ``Input Dims`` text decoded once (None when unreadable)."""
    out = []
    for text in categories:
        try:
            value = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            value = None
        out.append(value if isinstance(value, list) else None)
    return out


def _arg(dims: list | None, i: int) -> str:
    return shape_text(dims[i]) if dims is not None and i < len(dims) else ""


def _rows(rank: int, role: str, step, names, shapes, counts) -> pd.DataFrame:
    return pd.DataFrame({"rank": rank, "role": role, S.STEP: step, S.NAME: names,
                         "shape": shapes, "count": counts}, columns=list(SIGNATURE_COLUMNS))


def _codes(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list, list]:
    names = ops[S.NAME].cat
    dims = ops[S.INPUT_DIMS].cat
    return (names.codes.to_numpy(), dims.codes.to_numpy(),
            [str(c) for c in names.categories], _parsed([str(c) for c in dims.categories]))


def _is_weight_op(names: pd.Series) -> np.ndarray:
    hit = np.array([str(c) in WEIGHT_OPS for c in names.cat.categories] + [False])
    return hit[names.cat.codes.to_numpy()]


def _outermost(ops: pd.DataFrame) -> pd.DataFrame:
    """``ops`` without those inside an op of the same name on the same thread: autocast
    records ``aten::linear`` twice, the outer call with the fp32 weight and the inner one
    with its bf16 copy, and the model has one linear there, not two."""
    if ops.empty:
        return ops
    key = pd.DataFrame({"tid": ops[S.TID].to_numpy(), "n": ops[S.NAME].cat.codes.to_numpy(),
                        "ts": ops[S.TS_NS].to_numpy(),
                        "end": (ops[S.TS_NS] + ops[S.DUR_NS]).to_numpy()})
    order = np.lexsort((key["ts"].to_numpy(), key["n"].to_numpy(), key["tid"].to_numpy()))
    k = key.iloc[order]
    same = (k["tid"].to_numpy()[1:] == k["tid"].to_numpy()[:-1]) & \
        (k["n"].to_numpy()[1:] == k["n"].to_numpy()[:-1])
    # the previous call of the name on the thread still running: a nested call
    inner = np.r_[False, same & (k["ts"].to_numpy()[1:] < k["end"].to_numpy()[:-1])]
    keep = np.ones(len(ops), bool)
    keep[order[inner]] = False
    return ops[keep]


def _params(rank: int, ops: pd.DataFrame) -> pd.DataFrame:
    """Weight shapes of the weight-taking ops, counted over the used steps."""
    ops = _outermost(ops[_is_weight_op(ops[S.NAME])])
    if ops.empty:
        return _rows(rank, PARAM, [], [], [], [])
    name_codes, dim_codes, names, dims = _codes(ops)
    pairs, _, counts = unique_rows([name_codes, dim_codes])  # each (op, dims) pair once
    totals: dict[tuple[str, str], int] = {}
    for (n, d), count in zip(pairs.tolist(), counts.tolist()):
        spec = WEIGHT_OPS.get(names[n]) if n >= 0 else None
        if spec is None or d < 0:
            continue
        for i in spec[0]:
            shape = _arg(dims[d], i)
            if shape:
                totals[(names[n], shape)] = totals.get((names[n], shape), 0) + count
    if not totals:
        return _rows(rank, PARAM, [], [], [], [])
    keys = sorted(totals)  # by name, then shape: as grouping them sorts them
    return _rows(rank, PARAM, -1, [n for n, _ in keys], [sh for _, sh in keys],
                 np.array([totals[k] for k in keys], dtype=np.int64))


def _in_backward(ops: pd.DataFrame, backward: pd.DataFrame) -> np.ndarray:
    """Mask of the weight ops of ``ops`` that start inside a ``backward`` range of their
    thread (a recomputed forward: backward nodes never call them)."""
    out = np.zeros(len(ops), bool)
    weight = _is_weight_op(ops[S.NAME]) if len(ops) else out
    if backward.empty or not weight.any():
        return out
    ts, tid = ops[S.TS_NS].to_numpy(), ops[S.TID].to_numpy()
    for thread, ranges in backward.groupby(S.TID, sort=False):
        start = ranges[S.TS_NS].to_numpy()
        end = start + ranges[S.DUR_NS].to_numpy()
        order = np.argsort(start, kind="stable")
        start, reach = start[order], np.maximum.accumulate(end[order])
        mine = np.flatnonzero(weight & (tid == thread))
        at = np.searchsorted(start, ts[mine], side="right") - 1
        inside = at >= 0
        inside[inside] = ts[mine][inside] < reach[at[inside]]
        out[mine[inside]] = True
    return out


def _recomputed(rank: int, ops: pd.DataFrame) -> pd.DataFrame:
    """The weight ops run again in the backward pass, counted by name over the used steps
    (outermost calls only, as for the parameters)."""
    ops = _outermost(ops)
    counts = _name_counts(ops[S.NAME].cat.remove_unused_categories()) if len(ops) else \
        pd.Series(dtype=np.int64)
    return _rows(rank, RECOMPUTE, -1, counts.index.to_numpy(dtype=object), "", counts.to_numpy())


def _firsts(rank: int, role: str, ops: pd.DataFrame, pair: np.ndarray, shapes: np.ndarray,
            name_of: list) -> pd.DataFrame:
    """Per step, the first op (ops are in time order) whose (op, dims) pair (``pair``: each
    op's) has a shape (``shapes``: each pair's, "" for none), and that shape."""
    pick = (shapes != "")[pair]
    steps = ops[S.STEP].to_numpy()[pick]
    if not len(steps):
        return _rows(rank, role, [], [], [], [])
    _, first = np.unique(steps, return_index=True)
    codes = ops[S.NAME].cat.codes.to_numpy()[pick][first]
    return _rows(rank, role, steps[first], [name_of[c] for c in codes],
                 shapes[pair[pick][first]], 1)


def _inputs(rank: int, ops: pd.DataFrame) -> list[pd.DataFrame]:
    """Per step: the model's input (the first weight op's activation) and the first tensor
    shape of the step; each distinct (op, dims) pair decoded once."""
    name_codes, dim_codes, names, dims = _codes(ops)
    width = len(dims) + 1
    # each distinct pair once, in the order pairs first come (a hash: np.unique sorts them)
    inverse, pairs = pd.factorize(name_codes.astype(np.int64) * width + dim_codes)
    model_in, first = [], []
    for pair in pairs.tolist():
        n, d = divmod(pair, width)
        name, shape_list = names[n] if n >= 0 else "", dims[d] if d < len(dims) else None
        model_in.append(_arg(shape_list, WEIGHT_OPS[name][1]) if name in WEIGHT_OPS else "")
        first.append(_arg(shape_list, 0))
    pair = inverse.ravel()  # read per pair, not per op
    return [_firsts(rank, INPUT, ops, pair, np.array(model_in + [""], dtype=object), names),
            _firsts(rank, FIRST, ops, pair, np.array(first + [""], dtype=object), names)]


def _named(rank: int, role: str, frame: pd.DataFrame) -> pd.DataFrame:
    counts = _name_counts(frame[S.NAME])
    return _rows(rank, role, -1, counts.index.to_numpy(dtype=object), "", counts.to_numpy())


def _name_counts(names: pd.Series) -> pd.Series:
    """``names.astype(str).value_counts()`` of a categorical column, counted by code: no
    string per row (a rank with Python stacks has millions of these rows)."""
    codes = names.cat.codes.to_numpy()
    if (codes < 0).any():  # a missing name: as pandas spells it
        return names.astype(str).value_counts()
    used, first, counts = np.unique(codes, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")  # value_counts' order before it sorts
    labels = np.asarray(names.cat.categories, dtype=object)[used[order]].astype(str)
    return pd.Series(counts[order], index=pd.Index(labels, dtype=object, name=S.NAME),
                     name="count").sort_values(ascending=False, kind="stable")


def step_signature(rank: int, events: pd.DataFrame, in_used: np.ndarray) -> pd.DataFrame:
    """``used_step_shapes`` of one rank (module doc) from its events and the mask of the
    events in its used steps (each kind's rows selected from ``events`` at once: the used
    steps are most of a rank, and a copy of all their rows first cost more than the rest)."""
    kind, names = events[S.KIND], events[S.NAME]
    parts = []
    if S.INPUT_DIMS in events.columns:
        dims = events[S.INPUT_DIMS].cat
        recorded = np.array([bool(c) for c in dims.categories] + [False])
        ops = events.loc[in_used & values_in(kind, (S.KIND_CPU_OP,))
                         & recorded[dims.codes.to_numpy()], list(OP_COLUMNS)]
        if len(ops):
            again = _in_backward(ops, events.loc[in_used & values_in(kind, (S.KIND_CPU_OP,))
                                                 & category_mask(names, BACKWARD_RANGE_RE),
                                                 [S.TID, S.TS_NS, S.DUR_NS]])
            parts += [_params(rank, ops[~again]), *_inputs(rank, ops),
                      _recomputed(rank, ops[again])]
    annotations = events.loc[in_used & values_in(kind, (S.KIND_ANNOTATION,))
                             & ~category_mask(names, "^" + re.escape(STEP_PREFIX)), [S.NAME]]
    python = events.loc[in_used & values_in(kind, (S.KIND_PYTHON,))
                        & category_mask(names, "^" + re.escape(MODULE_PREFIX)), [S.NAME]]
    parts += [_named(rank, ANNOTATION, annotations), _named(rank, MODULE, python)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return _rows(rank, PARAM, [], [], [], [])
    return pd.concat(parts, ignore_index=True)
