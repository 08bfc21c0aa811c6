"""DeepSpeed ZeRO-3: what its trace shows of the sharded layout, per step.

DeepSpeed records no ``record_function`` range per unit (its ``instrument_w_nvtx`` ranges are
NVTX, which Kineto does not keep), but ZeRO-3's module hooks run autograd Functions whose
names the profiler does keep: ``PreBackwardFunctionForModule`` on the outputs of every module
forward it hooks, ``PostBackwardFunctionModule`` on the inputs, and ``LinearFunctionForZeroStage3``
for the Linear layers it patches (``deepspeed/runtime/zero/parameter_offload.py`` and
``linear.py``; ZeRO stages 1 and 2 have none of them). A rank with any of them runs ZeRO-3.

Its collectives are read from the c10d operators that issue them, whatever the backend:
``c10d::_allgather_base_`` (``all_gather_into_tensor``: one call per parameter fetch,
coalescing every parameter the fetch brings in, prefetched ones too),
``c10d::_reduce_scatter_base_`` (one call per gradient bucket), and their list and
coalesced forms. A call's size is its gathered (or reduced) buffer in elements, the largest
argument of the operator (``Input Dims``): the unit DeepSpeed's knobs are set in
(``stage3_prefetch_bucket_size``, ``reduce_bucket_size``). On gloo a reduce-scatter runs as
an all-reduce of the whole buffer: the collectives table shows an all-reduce, the operator
here still a reduce-scatter.

Each call is placed in the step's forward (before its first
``autograd::engine::evaluate_function``), backward (until the last one ends) or after the
backward (DeepSpeed's gradient epilogue, the optimizer step, and the re-gather of the
persistent parameters it updated). On GPU ranks, the all-gather and reduce-scatter kernels'
time with no compute kernel beside them is the exposed time, as for FSDP
(:func:`profkit.analyzers.measure.fsdp_units.step_costs`), and the GPU's wait on the host
inside ZeRO-3's code is the hook wait: the idle time the breakdown names (``idle_code``)
whose code is one of DeepSpeed's autograd Functions (``MARKERS``, their backward nodes
included) or the c10d operator of a fetch. torch's ``AccumulateGrad`` nodes, where
DeepSpeed's gradient hooks run, and Python between recorded ops are left out: the trace
does not say how much of them is DeepSpeed's (a lower bound).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from profkit.analyzers.measure.fsdp_units import step_costs
from profkit.analyzers.result import Result

from profkit import schema as S
from profkit.model import RankData

TOPIC = "zero3"
RANKS_TABLE = "zero3_ranks"
CALLS_TABLE = "zero3_calls"
HOOK = "PreBackwardFunctionForModule"
MARKERS = (HOOK, "PostBackwardFunctionModule", "LinearFunctionForZeroStage3")
GATHER, SCATTER = "all_gather", "reduce_scatter"
OPS = {"c10d::_allgather_base_": GATHER, "c10d::allgather_into_tensor_coalesced_": GATHER,
       "c10d::allgather_": GATHER, "c10d::_reduce_scatter_base_": SCATTER,
       "c10d::reduce_scatter_tensor_coalesced_": SCATTER, "c10d::reduce_scatter_": SCATTER}
BACKWARD = "autograd::engine::evaluate_function"
PHASES = ("forward", "backward", "after backward")
HOOK_CODE = (*MARKERS, *OPS)  # an idle_code label naming one of these is ZeRO-3's host work


def numel(dims: object) -> int:
    """Elements of one operator argument as ``Input Dims`` writes it: ``[4, 256]`` a tensor,
    ``[[4], [4]]`` a list of tensors (their sum), ``[]`` no tensor (0)."""
    if not isinstance(dims, list) or not dims:
        return 0
    if all(isinstance(d, int) for d in dims):
        return int(np.prod(dims, dtype=np.int64))
    return sum(numel(d) for d in dims)


def call_elements(input_dims: str) -> int:
    """A collective's buffer in elements: its largest argument (the gathered output of an
    all-gather, the unreduced input of a reduce-scatter); 0 when shapes were not recorded."""
    try:
        args = json.loads(input_dims) if input_dims else []
    except (TypeError, ValueError):
        return 0
    return max((numel(a) for a in args), default=0) if isinstance(args, list) else 0


def _top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """The operators not nested in an earlier one of the same thread (a coalesced call may
    issue the base operator inside itself)."""
    keep, end_of = [], {}
    for ts, dur, tid in zip(ops[S.TS_NS].to_numpy(np.int64), ops[S.DUR_NS].to_numpy(np.int64),
                            ops[S.TID].to_numpy()):
        inside = ts < end_of.get(tid, -1)
        keep.append(not inside)
        if not inside:
            end_of[tid] = ts + dur
    return ops[np.asarray(keep, bool)]


def _phases(cpu: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """Each call's phase in its step (module doc); steps without a backward are forward."""
    bw = cpu[cpu[S.NAME].astype(str).str.startswith(BACKWARD)]
    first = bw.groupby(S.STEP)[S.TS_NS].min()
    last = (bw[S.TS_NS] + bw[S.DUR_NS]).groupby(bw[S.STEP]).max()
    steps = calls[S.STEP].to_numpy()
    ts = calls[S.TS_NS].to_numpy(np.int64)
    lo = first.reindex(steps).to_numpy(float)
    hi = last.reindex(steps).to_numpy(float)
    phase = np.where(np.isnan(lo) | (ts < lo), PHASES[0],
                     np.where(ts <= hi, PHASES[1], PHASES[2]))
    return phase


def rank_zero3(data: RankData, used: dict[int, int] | None, parts: dict | None) -> dict | None:
    """This rank's ZeRO-3 calls in the used steps and their costs (None: not ZeRO-3)."""
    if not data.events[S.NAME].isin(MARKERS).any():  # (categorical: compares categories)
        return None
    cpu = data.of_kinds((S.KIND_CPU_OP,))
    if used is not None:
        cpu = cpu[cpu[S.STEP].isin(list(used))]
    else:
        cpu = cpu[cpu[S.STEP] >= 0]
    if not cpu[S.NAME].isin(MARKERS).any():  # none in the used steps
        return None
    names = cpu[S.NAME].astype(str)
    n_steps = max(cpu[S.STEP].nunique(), 1)
    ops = cpu[names.isin(list(OPS))].sort_values(S.TS_NS, kind="stable")
    ops = _top_level(ops)
    dims = ops[S.INPUT_DIMS] if S.INPUT_DIMS in ops else pd.Series([""] * len(ops))
    calls = pd.DataFrame({
        "kind": [OPS[str(n)] for n in ops[S.NAME]],
        "phase": _phases(cpu, ops) if len(ops) else np.array([], str),
        "elements": [call_elements(d) for d in dims.astype(object).fillna("")],
        S.STEP: ops[S.STEP].to_numpy(np.int64)})
    out = {"n_steps": n_steps, "calls": calls,
           "hooked_forwards_per_step": float((names == HOOK).sum()) / n_steps,
           "exposed_comm_ms_per_step": np.nan, "host_idle_ms_per_step": np.nan,
           "step_ms": np.nan, "hook_idle_ms_per_step": np.nan}
    if data.has_gpu:
        costs = step_costs(data, used, parts, cpu.iloc[:0], n_steps)
        out.update({k: costs[k] for k in ("exposed_comm_ms_per_step", "host_idle_ms_per_step",
                                          "step_ms")})
        out["hook_idle_ms_per_step"] = hook_idle_ms(parts)
    return out


def hook_idle_ms(parts: dict | None) -> float:
    """ms per used step the GPU waits on the host inside ZeRO-3's code (module doc), from
    the breakdown's ``idle_code`` (its largest labels per part); NaN without it."""
    code = None if parts is None else parts.get("idle_code")
    steps = None if parts is None else parts.get("step_breakdown")
    if code is None or steps is None or not len(steps):
        return np.nan
    n_used = int(steps["used"].astype(bool).sum()) or len(steps)
    if code.empty:
        return 0.0
    mine = code["code"].astype(str).map(lambda c: any(m in c for m in HOOK_CODE))
    return float(code.loc[mine.to_numpy(bool), "idle_ns"].sum()) / n_used / 1e6


def combine_zero3(values: dict[int, dict | None]) -> Result:
    """One row per ZeRO-3 rank (:func:`rank_rows`) and its calls per step by kind, phase and
    size; an empty result (no topic) in a run without ZeRO-3."""
    ranks = rank_rows(values)
    if ranks is None:
        return Result()
    sizes = []
    for rank, v in sorted(values.items()):
        if not v or v["calls"].empty:
            continue
        g = v["calls"].groupby(["kind", "phase", "elements"], sort=False).size()
        sizes.append(pd.DataFrame({"rank": rank, "kind": g.index.get_level_values(0),
                                   "phase": g.index.get_level_values(1),
                                   "elements": g.index.get_level_values(2),
                                   "calls_per_step": g.to_numpy() / v["n_steps"]}))
    calls = pd.concat(sizes, ignore_index=True) if sizes else pd.DataFrame(
        columns=["rank", "kind", "phase", "elements", "calls_per_step"])
    return Result(tables={RANKS_TABLE: ranks, CALLS_TABLE: calls}, facts={"topic": TOPIC})


def rank_rows(values: dict[int, dict | None]) -> pd.DataFrame | None:
    """Per rank and step: hooked module forwards, all-gathers in each phase (calls and
    elements), reduce-scatters (calls and elements), the largest call of each kind, and on
    GPU ranks the exposed ZeRO-3 collectives, the GPU's wait on its host, the part of it
    inside ZeRO-3's code (the hook wait) and the step (ms)."""
    rows = []
    for rank, v in sorted(values.items()):
        if not v:
            continue
        c, n = v["calls"], v["n_steps"]
        row = {"rank": rank, "steps": n, "hooked_forwards_per_step": v["hooked_forwards_per_step"]}
        for phase in PHASES:
            key = phase.replace(" ", "_")
            mine = c[(c["kind"] == GATHER) & (c["phase"] == phase)]
            row[f"all_gathers_{key}"] = len(mine) / n
            row[f"all_gather_elements_{key}"] = float(mine["elements"].sum()) / n
        for kind, label in ((GATHER, "all_gather"), (SCATTER, "reduce_scatter")):
            mine = c[c["kind"] == kind]
            if kind == SCATTER:
                row["reduce_scatters"] = len(mine) / n
                row["reduce_scatter_elements"] = float(mine["elements"].sum()) / n
            row[f"{label}_max_elements"] = int(mine["elements"].max()) if len(mine) else 0
        row.update({k: v.get(k, np.nan) for k in ("exposed_comm_ms_per_step",
                                                  "host_idle_ms_per_step", "step_ms",
                                                  "hook_idle_ms_per_step")})
        rows.append(row)
    return pd.DataFrame(rows) if rows else None
