"""What each kernel costs: the FLOPs and bytes of the op that launched it, and the precision
it ran in.

Costs sit on CPU ops, worked out once at ingest from their shapes and dtypes (``flops``:
matmul / conv / attention FLOPs; ``op_read_bytes``, ``op_write_bytes``, ``vector_flops``:
profkit.classify.traffic). A kernel belongs to the op its ``External id`` names, which is
the innermost op on the stack when it was launched (``aten::mm`` under ``aten::linear``), so
nothing is counted twice. An op launching several kernels splits its bytes and vector FLOPs
among them by duration, and its matmul FLOPs among its GEMM / conv / attention kernels.
Kernels without a known op (CUDA-graph replays, kernels launched outside recorded ops, ops
without a cost formula) get NaN.

Precision: the kernel's name when it says (``kernel_precision``: an fp32 op running TF32
kernels is tf32), else the dtype of its op's inputs (a custom kernel under an fp32 op is
fp32), else "".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify.flops import HALF_WIDTH, kernel_precision
from profkit.classify.opfamilies import op_family
from profkit.columns import distinct, find_rows, name_values, unique_rows, values_in
from profkit.model import RankData

MATMUL_SUBCLASSES = ("gemm", "conv", "attention")
MATMUL_FAMILIES = ("matmul", "conv", "attention")  # ops whose FLOPs are in ``flops``
COST_KEYS = [S.EXTERNAL_ID, S.STEP]
COST_INPUTS = (S.TS_NS, S.DUR_NS, S.NAME, S.SUBCLASS, S.STREAM, S.STEP, S.EXTERNAL_ID)  # read
KERNEL_COST_COLUMNS = (S.TS_NS, S.DUR_NS, S.NAME, S.SUBCLASS, S.STREAM, S.STEP, "op", "op_id",
                       "family", "flops", "read_bytes", "write_bytes", "precision")


def launching_ops(rd: RankData, kernels: pd.DataFrame) -> pd.DataFrame:
    """The CPU ops ``kernels`` name by (External id, step), where the pair names one op
    only; their name and costs (names as text)."""
    return _ops_naming(rd, distinct(kernels[S.EXTERNAL_ID].to_numpy()))


def _ops_naming(rd: RankData, wanted: np.ndarray) -> pd.DataFrame:
    """:func:`launching_ops` of the kernels whose distinct External ids are ``wanted``."""
    ev = rd.events
    ext = ev[S.EXTERNAL_ID].to_numpy()
    rows = np.flatnonzero(values_in(ev[S.KIND], (S.KIND_CPU_OP,)) & (ext >= 0) & np.isin(ext, wanted))
    if len(rows):  # a (External id, step) pair held by several ops names none of them
        _, at, count = unique_rows([ev[c].to_numpy()[rows] for c in COST_KEYS])
        rows = rows[count[at] == 1]
    out = {c: ev[c].to_numpy()[rows] for c in COST_KEYS}
    out["op"] = _texts(ev[S.NAME], rows)
    out[S.FLOPS] = ev[S.FLOPS].to_numpy()[rows]
    out[S.FLOPS_DTYPE] = _texts(ev[S.FLOPS_DTYPE], rows)
    out.update((c, ev[c].to_numpy()[rows]) for c in S.COST_COLUMNS)
    return pd.DataFrame(out)


def _texts(column: pd.Series, rows: np.ndarray) -> pd.Series:
    """The rows' values of a categorical column as text (missing where missing, as
    ``astype(str)`` gives them)."""
    names = np.append(np.asarray(column.dtype.categories, dtype=object), np.nan)
    return pd.Series(names[column.array.codes[rows]], dtype=str)


def kernel_costs(rd: RankData, kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel of ``kernels`` (name and subclass categorical, as there) with its
    op (name, and ``op_id``: one number per op
    call, -1 without one), the op's family, its share of the op's FLOPs and bytes (NaN where
    unknown) and its precision (KERNEL_COST_COLUMNS)."""
    k = kernels  # read column by column (a selection of them copied every row)
    keys = [k[c].to_numpy(np.int64) for c in COST_KEYS]
    # Each kernel's op by (External id, step), a pair naming at most one op; -1: none.
    ops, op_families, flags, at = _op_rows(rd, keys)
    has_op = at >= 0
    of_each = np.where(has_op, at, 0)

    def of_op(column: str, missing) -> np.ndarray:
        values = ops[column].to_numpy()
        return np.where(has_op, values[of_each] if len(values) else missing, missing)

    dur = np.maximum(k[S.DUR_NS].to_numpy(dtype=float), 1.0)  # zero-length kernels share too
    op_id = np.where(has_op, unique_rows(keys)[1], -1) if len(k) else np.empty(0, np.int64)
    mm = values_in(k[S.SUBCLASS], MATMUL_SUBCLASSES)
    total = _group_sum(op_id, dur)
    total_mm = _group_sum(op_id, dur * mm)
    w_all = dur / total
    w_mm = np.where(total_mm > 0, dur * mm / np.where(total_mm > 0, total_mm, 1.0), w_all)
    matmul = of_op(S.FLOPS, np.nan).astype(float)
    vector = of_op(S.VECTOR_FLOPS, np.nan).astype(float)
    flops = np.where(matmul > 0, matmul * w_mm, vector * w_all)
    precision = _precisions(rd, k[S.NAME])
    dtype = of_op(S.FLOPS_DTYPE, "").astype(object)
    op = of_op("op", "").astype(object)
    family = np.where(has_op, op_families[of_each] if len(op_families) else "",
                      op_family("")).astype(object)  # as op_family of each op's name
    # A matmul / conv / attention op whose FLOPs are unknown has no cost: its bytes alone
    # would make it look memory-bound. (Read per op: isin of the kernels' texts costs more.)
    if len(ops):
        mm_family, half = flags[0][of_each], flags[1][of_each]
    else:  # no kernel has an op
        mm_family = half = np.zeros(len(k), dtype=bool)
    known = ~np.where(has_op, mm_family, op_family("") in MATMUL_FAMILIES) | (matmul > 0)
    w_all = np.where(known, w_all, np.nan)
    return pd.DataFrame({
        S.TS_NS: k[S.TS_NS].to_numpy(), S.DUR_NS: k[S.DUR_NS].to_numpy(),
        S.NAME: k[S.NAME].to_numpy(), S.SUBCLASS: k[S.SUBCLASS].to_numpy(),
        S.STREAM: k[S.STREAM].to_numpy(), S.STEP: k[S.STEP].to_numpy(),
        "op": op, "op_id": op_id, "family": family,
        "flops": np.where(known, flops, np.nan),
        "read_bytes": of_op(S.OP_READ_BYTES, np.nan).astype(float) * w_all,
        "write_bytes": of_op(S.OP_WRITE_BYTES, np.nan).astype(float) * w_all,
        "precision": np.where((precision == HALF_WIDTH) & has_op & half,
                              dtype, np.where(precision != "", precision, dtype))})


def _op_rows(rd: RankData, keys: list[np.ndarray]
             ) -> tuple[pd.DataFrame, np.ndarray, tuple, np.ndarray]:
    """(ops, their families, :func:`_op_flags`, each kernel's row among them or -1) for
    kernels of (External id, step) ``keys``. The ops every kernel of the rank names are found once per rank
    (kernel_costs runs on three or four sets of its kernels): a pair names the same op, or
    none, whichever of them are asked for."""
    wanted = distinct(keys[0])
    ops, known, op_keys, families, flags = rd.derived(_rank_ops)
    if not np.isin(wanted, known).all():  # not only the rank's kernels: their own ops
        ops = _ops_naming(rd, wanted)
        op_keys = [ops[c].to_numpy(np.int64) for c in COST_KEYS]
        families = name_values(ops["op"], op_family)
        flags = _op_flags(ops, families)
    return ops, families, flags, find_rows(op_keys, keys)


def _op_flags(ops: pd.DataFrame, families: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per op: whether its family is a matmul's (:data:`MATMUL_FAMILIES`), whether its
    inputs are half-width (bf16, fp16)."""
    return (np.isin(families, MATMUL_FAMILIES),
            np.isin(ops[S.FLOPS_DTYPE].to_numpy(dtype=object), ("bf16", "fp16")))


def _rank_ops(rd: RankData) -> tuple:
    """(:func:`launching_ops` of all the rank's kernels, their External ids, the ops' keys,
    their families: ``op_family`` of their names, "" where missing; :func:`_op_flags`)."""
    known = distinct(rd.of_kinds((S.KIND_KERNEL,), (S.EXTERNAL_ID,))[S.EXTERNAL_ID].to_numpy())
    ops = _ops_naming(rd, known)
    families = name_values(ops["op"], op_family)
    return (ops, known, [ops[c].to_numpy(np.int64) for c in COST_KEYS], families,
            _op_flags(ops, families))


def _precisions(rd: RankData, names: pd.Series) -> np.ndarray:
    """``name_values(names, kernel_precision)``, read from a table of the precision of each
    name the rank's kernels have, made once per rank, where ``names`` are some of them."""
    table = rd.derived(_precision_table)
    if table is not None and isinstance(names.dtype, pd.CategoricalDtype) \
            and names.dtype.categories is table[0]:
        codes = names.array.codes
        if table[2][codes].all():
            return table[1][codes]
    return name_values(names, kernel_precision)


def _precision_table(rd: RankData) -> tuple | None:
    """(the kernel names' categories, the precision of each (the last: "", for a missing
    name), whether each was worked out: the names the rank's kernels use)."""
    names = rd.of_kinds((S.KIND_KERNEL,), (S.NAME,))[S.NAME]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return None
    categories = names.dtype.categories
    codes = names.array.codes
    used = distinct(codes[codes >= 0])
    precision = np.full(len(categories) + 1, "", dtype=object)
    precision[used] = [kernel_precision(str(c)) for c in np.asarray(categories, dtype=object)[used]]
    done = np.zeros(len(categories) + 1, dtype=bool)
    done[used] = done[-1] = True
    return categories, precision, done


def _group_sum(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each row's group total of ``values`` (a row of group -1: its own value)."""
    out = values.copy()
    inside = group >= 0
    if inside.any():
        sums = np.bincount(group[inside], weights=values[inside])
        out[inside] = sums[group[inside]]
    return out
