"""Per inference phase: time and share, time to first token, time per output token, tokens
per second, GPU busy, the charged parts, MFU and HBM bandwidth against the device's roofs.

The forwards and their phases come from :mod:`.phases`; this module times them. With one
request batch per profiler step (HF ``generate``: the step's first forward is the prefill,
the others decode), the **time to first token** is the prefill window (the step's start
to the first token's ready time) and each decode window is one **time per output token**.
An engine's annotated steps (vLLM, SGLang) carry no request's arrival, so they get phase
times and per-forward times but no time to first token.

Decode reads every weight and the KV cache once per token: its roof is the bytes its ops
move per token (the ops' compulsory traffic from their shapes and dtypes,
``profkit.classify.traffic``) at the device's HBM bandwidth. Matmul ops' bytes are the
weights (their activations are a few rows at decode), attention ops' the KV cache. Kernels
without an op cost (Inductor's Triton kernels) move bytes this does not see: the share of
decode kernel time with a known cost is reported beside it, and the utilisation is a lower
bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.measure import phases as P
from profkit.analyzers.measure.charge import charged_intervals, spans
from profkit.analyzers.measure.devices import lookup_device
from profkit.analyzers.measure.efficiency import rank_device
from profkit.analyzers.measure.efficiency import step_windows as efficiency_windows
from profkit.analyzers.measure.kernelcost import kernel_costs
from profkit.analyzers.measure.kernels import launch_join
from profkit.analyzers.measure.steps import step_windows
from profkit.analyzers.parts import PARTS
from profkit.analyzers.result import Result

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import values_in
from profkit.model import RankData

ELEMENT_BYTES = {"fp32": 4.0, "tf32": 4.0, "fp64": 8.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0,
                 "fp4": 0.5}
WEIGHT_OPERAND = {"aten::linear": 1, "aten::mm": 1, "aten::addmm": 2, "aten::_scaled_mm": 1}
REQUEST = "request"  # steps holding one prefill then its decode forwards (HF generate)
FORWARD_TABLE = ("rank", S.STEP, "forward", "phase", "window_start_ns", "window_end_ns",
                 "tokens", "batch", "kernels", "source", REQUEST, "start_ns", "until_ns")
MIN_COVERAGE = 0.5  # below this share of kernel time with an op cost, bytes come from weights
ESTIMATE = "estimate from the eager forwards"


def _windows(rd: RankData, used: dict[int, int] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, step) of the steps the verdict reads; without steps, the one window the
    breakdown reads (the GPU's first start to its last end), step -1."""
    if len(rd.steps):
        start, end, step = step_windows(rd.steps)
        keep = np.isin(step, list(used)) if used else np.ones(len(step), bool)
        return start[keep], end[keep], step[keep]
    start, end = efficiency_windows(rd)
    return start, end, np.full(len(start), -1)


def _step_of(starts: np.ndarray, ends: np.ndarray, steps: np.ndarray):
    """Each timestamp's step; without steps, everything before the window's end is in it (an
    engine's annotation starts before the GPU's first kernel)."""
    def step_of(ts: np.ndarray) -> np.ndarray:
        if len(steps) == 1 and steps[0] == -1:
            return np.where(ts < ends[0], -1, -2)
        at = np.searchsorted(starts, ts, side="right") - 1
        inside = (at >= 0) & (ts < ends[np.maximum(at, 0)])
        return np.where(inside, steps[np.maximum(at, 0)], -2)  # -2: outside the used steps
    return step_of


def time_forwards(rd: RankData, fw: pd.DataFrame, w_start: np.ndarray, w_end: np.ndarray,
                  w_step: np.ndarray) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Each forward's GPU work (launched from its start up to the next forward's, or its
    step's end), its token's ready time and its window (module doc of :mod:`.phases`);
    with, per GPU event, the forward that launched it and whether one did."""
    fw = fw[fw[S.STEP] != -2].reset_index(drop=True)
    start = fw["start_ns"].to_numpy(np.int64)
    step_end = dict(zip(w_step.tolist(), w_end.tolist()))
    step_start = dict(zip(w_step.tolist(), w_start.tolist()))
    steps = fw[S.STEP].to_numpy()
    nxt = np.append(start[1:], np.iinfo(np.int64).max)
    limit = np.minimum(nxt, [step_end[s] for s in steps])
    _, enq, _ = launch_join(rd)
    launched = enq["enq"].to_numpy(np.int64)
    at = np.searchsorted(start, launched, side="right") - 1
    mine = (at >= 0) & (launched < limit[np.maximum(at, 0)])
    ready = np.full(len(fw), np.iinfo(np.int64).min)
    np.maximum.at(ready, at[mine], enq["end"].to_numpy(np.int64)[mine])
    kernels = np.bincount(at[mine], minlength=len(fw))
    first = np.r_[True, steps[1:] != steps[:-1]]
    request = _request_steps(fw, first)
    w0 = np.empty(len(fw), np.int64)
    w1 = np.empty(len(fw), np.int64)
    for i in range(len(fw)):
        if first[i]:
            w0[i] = step_start[steps[i]] if request[i] else max(start[i], step_start[steps[i]])
        else:
            w0[i] = w1[i - 1]
        w1[i] = max(ready[i] if kernels[i] else fw["end_ns"].iat[i], w0[i])
    return pd.DataFrame({
        "rank": rd.rank, S.STEP: steps, "forward": fw.groupby(S.STEP).cumcount().to_numpy(),
        "phase": fw["phase"].to_numpy(), "window_start_ns": w0, "window_end_ns": w1,
        "tokens": fw["tokens"].to_numpy(float), "batch": _batch(fw), "kernels": kernels,
        "source": fw["source"].to_numpy(), REQUEST: request, "start_ns": start,
        "until_ns": limit}), at, mine


def _request_steps(fw: pd.DataFrame, first: np.ndarray) -> np.ndarray:
    """Per forward: its step is one request batch (a step, prefill first, then decode);
    ``first`` marks each step's first forward."""
    phase, steps, source = (fw[c].to_numpy(object) for c in ("phase", S.STEP, "source"))
    out = np.zeros(len(fw), bool)
    bounds = np.flatnonzero(first)
    for lo, hi in zip(bounds, np.append(bounds[1:], len(fw))):
        out[lo:hi] = (steps[lo] >= 0 and source[lo] != P.ENGINE and phase[lo] == P.PREFILL
                      and hi - lo > 1 and (phase[lo + 1:hi] == P.DECODE).all())
    return out


def _batch(fw: pd.DataFrame) -> np.ndarray:
    """Sequences per forward: as found, else (compiled) the step's decode tokens."""
    batch = fw["batch"].to_numpy(float).copy()
    decode = (fw["phase"] == P.DECODE).to_numpy()
    per_step = fw[decode].groupby(S.STEP)["tokens"].median()
    fill = fw[S.STEP].map(per_step).to_numpy(float)
    return np.where(np.isfinite(batch), batch, fill)


def rank_inference(rd: RankData, used: dict[int, int] | None, run_meta: dict) -> dict | None:
    """The rank's forwards and per-phase rows; None when it is not inference."""
    w_start, w_end, w_step = _windows(rd, used)
    if not len(w_start) or rd.gpu_events.empty:
        return None
    fw = P.find_forwards(rd, _step_of(w_start, w_end, w_step))
    if fw.empty:
        return None
    forwards, at, mine = time_forwards(rd, fw, w_start, w_end, w_step)
    if forwards.empty:
        return None
    rows = phase_rows(rd, forwards, at, mine, w_end - w_start, run_meta)
    return {"forwards": forwards, "phases": rows}


def phase_rows(rd: RankData, fw: pd.DataFrame, at: np.ndarray, mine: np.ndarray,
               step_ns: np.ndarray, run_meta: dict) -> pd.DataFrame:
    """One row per phase present: the figures of the module doc, per step."""
    w0, w1 = fw["window_start_ns"].to_numpy(), fw["window_end_ns"].to_numpy()
    parts = charged_intervals(rd, int(w0.min()), int(w1.max()))
    busy = iv.covered_each(spans(rd.gpu_events), w0, w1)
    per_part = {p: iv.covered_each(parts[p], w0, w1) for p in PARTS}
    costs = _costs(rd, at, mine, len(fw))
    weights = weight_bytes(rd, fw["start_ns"].to_numpy(), fw["until_ns"].to_numpy())
    prefill = (fw["phase"] == P.PREFILL).to_numpy()
    # an uncosted (graph-replayed) forward moves at least the weights the eager forwards
    # read, and about the KV cache the prefill's attention read (K and V of the prompt)
    costs["floor_weights"] = float(weights.max()) if len(weights) else 0.0
    costs["floor_kv"] = float(costs["kv_read"][prefill].max()) \
        if prefill.any() and costs["floor_weights"] > 0 else 0.0
    _, peak = lookup_device(rd.meta, run_meta, rank_device(rd))
    n_steps = max(fw[S.STEP].nunique(), 1)
    rows = []
    for phase in P.PHASES:
        sel = (fw["phase"] == phase).to_numpy()
        if not sel.any():
            continue
        time_ns = float((w1 - w0)[sel].sum())
        row: dict[str, Any] = {
            "rank": rd.rank, "phase": phase, "source": str(fw["source"].iat[0]),
            "steps": n_steps, "forwards_per_step": sel.sum() / n_steps,
            "batch": float(np.nanmedian(fw["batch"].to_numpy(float)[sel]))
            if np.isfinite(fw["batch"].to_numpy(float)[sel]).any() else np.nan,
            "tokens_per_forward": float(np.nanmedian(fw["tokens"].to_numpy(float)[sel]))
            if np.isfinite(fw["tokens"].to_numpy(float)[sel]).any() else np.nan,
            "time_ms": time_ns / n_steps / 1e6,
            "share": time_ns / max(float(step_ns.sum()), 1.0),
            "gpu_busy": float(busy[sel].sum()) / max(time_ns, 1.0),
            **{f"{p}_ms": float(per_part[p][sel].sum()) / n_steps / 1e6 for p in PARTS}}
        row.update(_token_times(fw, sel, phase))
        row.update(_roofs(costs, sel, time_ns, row, peak))
        rows.append(row)
    return pd.DataFrame(rows)


def _token_times(fw: pd.DataFrame, sel: np.ndarray, phase: str) -> dict[str, float]:
    """Time to first token (prefill of request steps), time per output token (decode of
    request steps; any decode forward's window otherwise), tokens per second."""
    length = (fw["window_end_ns"] - fw["window_start_ns"]).to_numpy(float)
    request = fw[REQUEST].to_numpy(bool)
    out = {"ttft_ms": np.nan, "tpot_ms": np.nan, "tpot_p10_ms": np.nan, "tpot_p90_ms": np.nan,
           "forward_ms": float(np.median(length[sel])) / 1e6}
    if phase == P.PREFILL and (sel & request).any():
        out["ttft_ms"] = float(np.median(length[sel & request])) / 1e6
    if phase == P.DECODE:
        per_token = length[sel] / 1e6
        out.update(tpot_ms=float(np.median(per_token)),
                   tpot_p10_ms=float(np.percentile(per_token, 10)),
                   tpot_p90_ms=float(np.percentile(per_token, 90)))
    tokens = fw["batch"].to_numpy(float)[sel] if phase == P.DECODE else \
        fw["tokens"].to_numpy(float)[sel]
    out["tokens_per_s"] = float(np.nansum(tokens)) / (length[sel].sum() / 1e9) \
        if np.isfinite(tokens).any() and length[sel].sum() > 0 else np.nan
    return out


def weight_bytes(rd: RankData, starts: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Per forward: the bytes of the matmul weights its outermost matmul ops read (the
    weight operand's shape at its precision, 2 bytes when unknown), ops started in
    [start, limit)."""
    ev = rd.events
    ops = P.outermost(ev.loc[values_in(ev[S.KIND], (S.KIND_CPU_OP,))
                             & values_in(ev[S.NAME], tuple(WEIGHT_OPERAND)),
                             [S.TS_NS, S.DUR_NS, S.NAME, S.INPUT_DIMS, S.FLOPS_DTYPE]])
    out = np.zeros(len(starts))
    ts = ops[S.TS_NS].to_numpy()
    at = np.searchsorted(starts, ts, side="right") - 1
    inside = (at >= 0) & (ts < limits[np.maximum(at, 0)]) if len(starts) else at >= 0
    shapes: dict[str, list] = {}  # each distinct Input Dims text read once
    for i, name, text, dtype in zip(at[inside], ops[S.NAME].astype(str)[inside],
                                    ops[S.INPUT_DIMS].astype(str)[inside],
                                    ops[S.FLOPS_DTYPE].astype(str)[inside]):
        if text not in shapes:
            shapes[text] = P.dims(text)
        shape, k = shapes[text], WEIGHT_OPERAND[name]
        w = shape[k] if len(shape) > k and isinstance(shape[k], list) else []
        if len(w) == 2 and all(isinstance(d, int) for d in w):
            out[i] += w[0] * w[1] * ELEMENT_BYTES.get(dtype, 2.0)
    return out


def _costs(rd: RankData, at: np.ndarray, mine: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Per forward: kernel FLOPs, bytes moved (all, matmul, attention), kernel time, and
    kernel time with a known cost."""
    gpu = rd.gpu_events
    is_kernel = (gpu[S.KIND] == S.KIND_KERNEL).to_numpy() & mine
    k = gpu[is_kernel]
    owner = at[is_kernel]
    costs = kernel_costs(rd, k)
    moved = (costs["read_bytes"] + costs["write_bytes"]).to_numpy(float)
    family = costs["family"].to_numpy(object)
    dur = costs[S.DUR_NS].to_numpy(float)

    def per_forward(values: np.ndarray) -> np.ndarray:
        return np.bincount(owner, weights=np.nan_to_num(values), minlength=n)

    return {"flops": per_forward(costs["flops"].to_numpy(float)), "bytes": per_forward(moved),
            "weight_bytes": per_forward(np.where(family == "matmul", moved, 0.0)),
            "kv_bytes": per_forward(np.where(family == "attention", moved, 0.0)),
            # K and V of an attention op's reads (Q, K, V of equal size; with grouped
            # queries K and V are smaller, and this errs high)
            "kv_read": per_forward(np.where(family == "attention",
                                            costs["read_bytes"].to_numpy(float) * 2 / 3, 0.0)),
            "kernel_ns": per_forward(dur),
            "known_ns": per_forward(np.where(np.isfinite(moved), dur, 0.0)),
            "precision": costs["precision"].to_numpy(object)}


def _roofs(costs: dict, sel: np.ndarray, time_ns: float, row: dict, peak) -> dict[str, float]:
    """MFU and HBM bandwidth utilisation over the phase's time; decode's bytes per token
    and the time per token at the HBM roof. Where kernels with an op cost take less than
    :data:`MIN_COVERAGE` of the phase's kernel time (graph replays), the bytes per forward
    are estimated from the eager forwards: their matmul weights and the prefill's attention
    bytes (``costs['floor']``)."""
    forwards = max(int(sel.sum()), 1)
    coverage = float(costs["known_ns"][sel].sum()) / max(float(costs["kernel_ns"][sel].sum()), 1.0)
    moved = float(costs["bytes"][sel].sum())
    weights = float(costs["weight_bytes"][sel].sum())
    kv = float(costs["kv_bytes"][sel].sum())
    source = "ops" if coverage >= MIN_COVERAGE else "ops (lower bound)"
    floor = (costs["floor_weights"] + costs["floor_kv"]) * forwards
    if coverage < MIN_COVERAGE and floor > moved:
        moved, source = floor, ESTIMATE
        weights, kv = costs["floor_weights"] * forwards, costs["floor_kv"] * forwards
    flops = float(costs["flops"][sel].sum())
    out = {"flops": flops, "bytes": moved, "bytes_per_token": moved / forwards,
           "weight_bytes_per_token": weights / forwards,
           "kv_bytes_per_token": kv / forwards,
           "bytes_coverage": coverage, "bytes_source": source,
           "mfu": np.nan, "hbm_util": np.nan, "roof_ms_per_token": np.nan, "peak_tflops": np.nan,
           "hbm_tbps": np.nan, "device_model": peak.key if peak else ""}
    if peak is None or time_ns <= 0:
        return out
    precisions = {p for p in costs["precision"] if isinstance(p, str) and p}
    _, tflops = peak.mfu_peak(precisions)
    out.update(peak_tflops=tflops, hbm_tbps=peak.mem_bw_tbps,
               mfu=flops / (time_ns * 1e-9 * tflops * 1e12) if flops > 0 else np.nan,
               hbm_util=moved / (time_ns * 1e-9 * peak.mem_bw_tbps * 1e12) if moved > 0 else np.nan)
    if moved > 0:
        out["roof_ms_per_token"] = out["bytes_per_token"] / (peak.mem_bw_tbps * 1e12) * 1e3
    return out


def combine_inference(values: dict[int, Any]) -> Result:
    """Every rank's phases and forwards; topic ``inference`` when some rank has phases."""
    found = [v for v in values.values() if v]
    if not found:
        return Result()
    return Result(tables={
        "inference_phases": pd.concat([v["phases"] for v in found], ignore_index=True),
        "inference_forwards": pd.concat([v["forwards"] for v in found], ignore_index=True)},
        facts={"topic": "inference"})
