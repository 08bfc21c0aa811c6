"""What one rank ran in its *used* steps (the steady ones the verdict reads): GPU ops and CPU
ops by name, with counts and times. ``profkit diff`` compares runs on these, per step, so
that a slow first step or a one-off step left out of the verdict is left out of the diff too,
and tells two workloads apart by what they ran.

Tables (one row per rank and name; times in ns summed over the rank's used steps):

- ``used_step_kernels``: rank, name, count, total_ns, group (kernels, copies, memsets;
  group: the compute sub-class ``gemm`` / ``attention`` / ``elementwise`` / ..., else the
  class and its sub-class, ``memcpy HtoD``, ``communication all_reduce``);
- ``used_step_ops``: rank, name, count, self_ns, total_ns (CPU ops, and the optimizer's
  ``Optimizer.step#...`` annotations, which say a step trained); self time as in
  ``top_ops``: its time minus that of the CPU ops and runtime calls directly inside it;
- ``used_step_shapes``: parameter shapes, step inputs, annotations and module names
  (:mod:`.signature`), what tells one model and batch from another.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.kernels import CPU_NEST_KINDS, NEST_COLUMNS, self_times
from profkit.analyzers.measure.signature import step_signature
from profkit.analyzers.measure.steps import USED
from profkit.analyzers.measure.tables import name_mask

from profkit import schema as S
from profkit.columns import distinct, values_in
from profkit.model import RankData

KERNEL_COLUMNS = ("rank", S.NAME, "count", "total_ns", "group")
OP_COLUMNS = ("rank", S.NAME, "count", "self_ns", "total_ns")
USED_WORK_TABLES = ("used_step_kernels", "used_step_ops", "used_step_shapes")
OPTIMIZER_RE = re.compile(r"^Optimizer\.")
STEP_RE = re.compile(r"^ProfilerStep#")  # one name per step (a cpu_op in legacy traces)


def _in_used(frame: pd.DataFrame, data: RankData, used: np.ndarray) -> np.ndarray:
    """Rows of ``frame`` in the used steps; without ProfilerStep ranges, rows starting
    between the first GPU start and the last GPU end (the one window the breakdown uses)."""
    if len(data.steps):
        return np.isin(frame[S.STEP].to_numpy(), np.asarray(used, dtype=np.int64))
    gpu = data.gpu_events
    if gpu.empty:
        return np.zeros(len(frame), bool)
    lo, hi = gpu[S.TS_NS].min(), (gpu[S.TS_NS] + gpu[S.DUR_NS]).max()
    return ((frame[S.TS_NS] >= lo) & (frame[S.TS_NS] <= hi)).to_numpy()


def _by_name(rank: int, frame: pd.DataFrame, values: dict[str, np.ndarray],
             columns: tuple[str, ...]) -> pd.DataFrame:
    """Count and sums of ``values`` per name, grouped on the name's category codes (no
    per-row strings), in the order of the codes."""
    if frame.empty:
        return pd.DataFrame(columns=list(columns))
    names = frame[S.NAME]
    if not all(np.issubdtype(np.asarray(v).dtype, np.integer) for v in values.values()):
        table = pd.DataFrame({"code": names.cat.codes.to_numpy(), "count": 1, **values})
        out = table.groupby("code").sum()
        out = out[out.index >= 0]  # rows without a name
        out[S.NAME] = np.asarray(names.cat.categories, dtype=object)[out.index.to_numpy()]
        return out.reset_index(drop=True).assign(rank=rank)[list(columns)]
    # integer sums: added up per code at once, exactly as grouping by the codes adds them
    codes = names.cat.codes.to_numpy()
    named = codes >= 0  # rows without a name are left out
    count = np.bincount(codes[named], minlength=len(names.cat.categories))
    used = np.flatnonzero(count)  # the codes in order, as grouping by them gives them
    position = np.zeros(len(count), dtype=np.intp)
    position[used] = np.arange(len(used))
    at = position[codes[named]]  # each row's place among them
    sums = {}
    for column, value in values.items():
        sums[column] = np.zeros(len(used), dtype=np.asarray(value).dtype)
        np.add.at(sums[column], at, np.asarray(value)[named])
    out = pd.DataFrame({"count": count[used].astype(np.int64), **sums,
                        S.NAME: np.asarray(names.cat.categories, dtype=object)[used]})
    return out.assign(rank=rank)[list(columns)]


def _groups(gpu: pd.DataFrame) -> dict[str, str]:
    """Kernel name -> its group (module doc), read once per name."""
    if gpu.empty:
        return {}
    if all(isinstance(gpu[c].dtype, pd.CategoricalDtype) for c in (S.CLASS, S.SUBCLASS)):
        return _groups_by_code(gpu)
    first = gpu.groupby(gpu[S.NAME].cat.codes.to_numpy())[[S.CLASS, S.SUBCLASS]].first()
    first = first[first.index >= 0]
    names = np.asarray(gpu[S.NAME].cat.categories, dtype=object)[first.index.to_numpy()]
    return {n: _group(cls, sub) for n, cls, sub in
            zip(names, first[S.CLASS].astype(str), first[S.SUBCLASS].astype(str))}


def _groups_by_code(gpu: pd.DataFrame) -> dict[str, str]:
    """:func:`_groups` by codes: each name's first class and sub-class that is not missing
    (as ``groupby(...).first()`` takes them; "nan" where every one is)."""
    names = gpu[S.NAME].array.codes
    used = distinct(names[names >= 0])
    firsts = []
    for column in (S.CLASS, S.SUBCLASS):
        codes = gpu[column].array.codes
        rows = np.flatnonzero((codes >= 0) & (names >= 0))
        found, at = np.unique(names[rows], return_index=True)  # each name's first such row
        text = np.full(len(used), "nan", dtype=object)
        labels = np.asarray(gpu[column].dtype.categories, dtype=object)
        text[np.searchsorted(used, found)] = [str(v) for v in labels[codes[rows[at]]]]
        firsts.append(text)
    name_text = np.asarray(gpu[S.NAME].dtype.categories, dtype=object)[used]
    return {n: _group(cls, sub) for n, cls, sub in zip(name_text, *firsts)}


def _group(cls: str, sub: str) -> str:
    if cls == S.CLS_COMPUTE and sub:
        return sub
    return " ".join(dict.fromkeys(v for v in (cls, sub) if v)) or "other"


def used_step_work(data: RankData, steps: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``used_step_kernels``, ``used_step_ops`` and ``used_step_shapes`` of one rank (see
    the module doc) from its ``step_breakdown`` rows ``steps``."""
    used = steps.loc[steps[USED].astype(bool), S.STEP].to_numpy() if len(steps) else []
    ev = data.events
    gpu = data.gpu_events
    gpu = gpu[_in_used(gpu, data, used)]
    kernels = _by_name(data.rank, gpu, {"total_ns": gpu[S.DUR_NS].to_numpy()},
                       KERNEL_COLUMNS[:-1])
    kernels["group"] = kernels[S.NAME].map(_groups(gpu)).fillna("other")
    optimizer = values_in(ev[S.KIND], (S.KIND_ANNOTATION,)) & name_mask(ev[S.NAME], OPTIMIZER_RE)
    in_used = _in_used(ev, data, used)
    # the ranges nesting reads (CPU ops, calls and the optimizer's), as numpy columns
    nest = np.flatnonzero(values_in(ev[S.KIND], CPU_NEST_KINDS) | optimizer)
    self_ns = self_times(pd.DataFrame({c: ev[c].to_numpy()[nest] for c in NEST_COLUMNS
                                       if c not in (S.KIND, S.NAME)}))
    keep = (values_in(ev[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION))
            & ~name_mask(ev[S.NAME], STEP_RE) & in_used)[nest]
    ops = nest[keep]
    ops = _by_name(data.rank, pd.DataFrame({S.NAME: ev[S.NAME].array.take(ops)}),
                   {"self_ns": self_ns[keep], "total_ns": ev[S.DUR_NS].to_numpy()[ops]}, OP_COLUMNS)
    shapes = step_signature(data.rank, ev, in_used)
    return {"used_step_kernels": kernels, "used_step_ops": ops, "used_step_shapes": shapes}
