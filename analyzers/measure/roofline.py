"""The kernel roofline: is each kernel bound by math, by memory bandwidth, or by its own
launch latency? (docs/roofline.md states the model and its assumptions.)

Per rank, over the steps the verdict uses, each kernel name gets its FLOPs and bytes per
step (analyzers/measure/kernelcost.py: the launching op's costs from its shapes), achieved
TFLOP/s and GB/s, the device's roofs (devices.py: the dense peak of the precision it ran in
for GEMM / conv / attention kernels, the fp32 vector peak for the rest; HBM bandwidth) and a
class. With ``t_math = FLOPs / peak FLOP/s`` and ``t_mem = bytes / peak bandwidth`` per
call: **latency** when ``max(t_math, t_mem)`` is under ``Thresholds.roofline_latency_ns``
(too little work to reach either roof: launch and ramp-up dominate), else **memory** when
``t_mem >= t_math``, else **math**; **unknown** without costs for most of its time or
without the device's peaks. A call estimated to move more than the HBM peak could in its
measured time is capped there (one tensor read twice, ``y * y``; inputs resident in L2).

Facts per rank for the findings: kernel time per class, the memory-bound time by op,
consecutive runs of fusable memory-bound kernels with the bytes one fused kernel would still
move (analyzers/measure/memruns.py), and the estimated DRAM bandwidth beside NVML's GPM
reading where one was sampled.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import DevicePeak, lookup_device
from profkit.analyzers.measure.efficiency import rank_device
from profkit.analyzers.measure.kernelcost import COST_INPUTS, MATMUL_SUBCLASSES, kernel_costs
from profkit.analyzers.measure.memruns import fusion_runs
from profkit.analyzers.measure.tables import RANK, empty, in_steps, kernels_of, window_ns
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import schema as S
from profkit.classify.names import short_kernel_names
from profkit.columns import aggregate, unique_rows, values_in
from profkit.model import RankData

ROOFLINE_COLUMNS = (RANK, "kernel", "short_name", "op", "calls_per_step", "kernel_ms_per_step",
                    "flops_per_step", "bytes_per_step", "achieved_tflops", "achieved_gbps",
                    "peak_tflops", "peak_gbps", "intensity_flop_per_byte", "bound")
BOUNDS = ("math", "memory", "latency", "unknown")
TOP_OPS = 5


def used_kernels(rd: RankData, used: dict[int, int] | None) -> tuple[pd.DataFrame, int, float]:
    """(kernels of the used steps: the columns kernel_costs reads, number of steps, mean
    step ns); without a step table, the window's kernels as one step. Communication kernels
    are no point on a roofline (their time is the link's and their peers'), so they are left
    out."""
    k = kernels_of(rd)
    k = k.loc[~values_in(k[S.CLASS], (S.CLS_COMMUNICATION,)), list(COST_INPUTS)]
    if used:
        return k[k[S.STEP].isin(list(used))], len(used), sum(used.values()) / len(used)
    k = in_steps(k, rd)
    n = max(len(rd.steps), 1)
    return k, n, window_ns(rd) / n


def with_bounds(costs: pd.DataFrame, peak: DevicePeak | None, latency_ns: float) -> pd.DataFrame:
    """``costs`` with each call's roofs (peak_tflops, peak_gbps) and class (bound)."""
    out = costs.copy()
    if peak is None:
        out["peak_tflops"], out["peak_gbps"], out["bound"] = np.nan, np.nan, "unknown"
        return out
    mm = out[S.SUBCLASS].isin(MATMUL_SUBCLASSES).to_numpy()
    precision = out["precision"]
    rates = {p: peak.peak_tflops(p) for p in precision.unique() if p}
    math_peak = precision.map(rates).fillna(peak.bf16_tflops).to_numpy(dtype=float)
    out["peak_tflops"] = np.where(mm, math_peak, peak.fp32_tflops)
    out["peak_gbps"] = peak.mem_bw_tbps * 1e3
    nbytes = (out["read_bytes"] + out["write_bytes"]).to_numpy()
    # More than the HBM peak could move in the kernel's time is an overestimate (one tensor
    # read twice, y * y; inputs resident in L2): capped there, reads and writes alike.
    cap = out[S.DUR_NS].to_numpy(dtype=float) * out["peak_gbps"].to_numpy()
    over = np.where(nbytes > cap, cap / np.where(nbytes > 0, nbytes, 1.0), 1.0)
    out["read_bytes"] *= over
    out["write_bytes"] *= over
    nbytes = nbytes * over
    out["bound"] = classify(out["flops"].to_numpy(), nbytes, out["peak_tflops"].to_numpy(),
                            out["peak_gbps"].to_numpy(), latency_ns)
    return out


def classify(flops: np.ndarray, nbytes: np.ndarray, peak_tflops: np.ndarray,
             peak_gbps: np.ndarray, latency_ns: float) -> np.ndarray:
    """The class of work of ``flops`` and ``nbytes`` per call (module doc); 1 TFLOP/s is
    1e3 FLOP per ns and 1 GB/s one byte per ns."""
    with np.errstate(divide="ignore", invalid="ignore"):  # no peak (unknown device): NaN
        t_math = np.nan_to_num(flops) / (peak_tflops * 1e3)
        t_mem = nbytes / peak_gbps
    out = np.where(t_mem >= t_math, "memory", "math").astype(object)
    out[np.maximum(t_math, t_mem) < latency_ns] = "latency"
    out[~np.isfinite(nbytes) | ~np.isfinite(peak_gbps)] = "unknown"
    return out


def rank_peak(rd: RankData, run_meta: dict) -> DevicePeak | None:
    return lookup_device(rd.meta, run_meta, rank_device(rd))[1]


def kernel_calls(rd: RankData, kernels: pd.DataFrame, peak: DevicePeak | None,
                 th: Thresholds = DEFAULT) -> pd.DataFrame:
    """Every kernel of ``kernels`` with its costs (kernelcost.py), roofs and class."""
    return with_bounds(kernel_costs(rd, kernels), peak, th.roofline_latency_ns)


def rank_roofline(rank: int, rd: RankData, run_meta: dict, used: dict[int, int] | None,
                  th: Thresholds = DEFAULT) -> dict:
    """One rank's roofline rows (without short names, given over all ranks) and facts."""
    k, n_steps, step_ns = used_kernels(rd, used)
    peak = rank_peak(rd, run_meta)
    calls = kernel_calls(rd, k, peak, th)
    table = roofline_rows(rank, calls, n_steps, th.roofline_latency_ns, name_groups(k[S.NAME]))
    return {"table": table, "facts": rank_facts(rank, calls, table, n_steps, step_ns, peak)}


def name_groups(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(each row's name as a number, -1 where missing; the names, in the order they first
    come): of a categorical column, from its codes (factorizing the long kernel names as
    text cost more than the roofline's sums)."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return pd.factorize(names.to_numpy(dtype=object))
    codes = names.array.codes
    group = np.full(len(codes), -1, dtype=np.intp)
    named = codes >= 0
    group[named], used = pd.factorize(codes[named])
    return group, np.asarray(names.dtype.categories, dtype=object)[used]


def roofline_rows(rank: int, calls: pd.DataFrame, n_steps: int, latency_ns: float,
                  groups: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """One row per kernel name: its calls summed over the used steps, per step (module doc).
    Calls whose op has no known cost count at the known calls' rate. ``groups``: the calls'
    :func:`name_groups`, when known."""
    if calls.empty:
        return empty(ROOFLINE_COLUMNS)
    group, names = name_groups(calls[S.NAME]) if groups is None else groups
    c = calls.assign(bytes=calls["read_bytes"] + calls["write_bytes"])
    c["known_ns"] = np.where(np.isfinite(c["bytes"]), c[S.DUR_NS], 0)
    c["flops_ns"] = np.where(np.isfinite(c["flops"]), c[S.DUR_NS], 0)
    c["tflops_x_ns"] = c["peak_tflops"] * c[S.DUR_NS]
    named = group >= 0  # calls without a name are no row
    g = c[named].groupby(group[named], sort=False)
    out = aggregate(g, dict(calls=(S.DUR_NS, "size"), ns=(S.DUR_NS, "sum"),
                            known_ns=("known_ns", "sum"), flops_ns=("flops_ns", "sum"),
                            nbytes=("bytes", "sum"), flops=("flops", "sum"),
                            tflops_x_ns=("tflops_x_ns", "sum"), peak_gbps=("peak_gbps", "first")))
    out.index = pd.Index(names[out.index.to_numpy()], dtype=object, name=S.NAME)
    out["op"] = _top_op(c, group, names)
    ns = np.maximum(out["ns"].to_numpy(dtype=float), 1.0)
    known = out["known_ns"].to_numpy(dtype=float)
    scale = np.where(known >= 0.5 * ns, ns / np.maximum(known, 1.0), np.nan)
    flop_scale = ns / np.maximum(out["flops_ns"].to_numpy(dtype=float), 1.0)
    nbytes = out["nbytes"].to_numpy() * scale / n_steps
    flops = np.where(np.isfinite(nbytes), out["flops"].to_numpy() * flop_scale / n_steps, np.nan)
    peak_tflops = out["tflops_x_ns"].to_numpy() / ns
    seconds = ns / n_steps * 1e-9
    calls_per_step = out["calls"].to_numpy() / n_steps
    bound = classify(flops / calls_per_step, nbytes / calls_per_step, peak_tflops,
                     out["peak_gbps"].to_numpy(dtype=float), latency_ns)
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
    table = pd.DataFrame({
        RANK: rank, "kernel": out.index.astype(str), "short_name": "", "op": out["op"].to_numpy(),
        "calls_per_step": calls_per_step, "kernel_ms_per_step": ns / n_steps / 1e6,
        "flops_per_step": flops, "bytes_per_step": nbytes,
        "achieved_tflops": flops / seconds / 1e12, "achieved_gbps": nbytes / seconds / 1e9,
        "peak_tflops": peak_tflops, "peak_gbps": out["peak_gbps"].to_numpy(dtype=float),
        "intensity_flop_per_byte": intensity, "bound": bound})
    return table.sort_values("kernel_ms_per_step", ascending=False, kind="stable") \
        .reset_index(drop=True)


def _top_op(c: pd.DataFrame, name_code: np.ndarray, names: np.ndarray) -> pd.Series:
    """Per kernel name (``name_code``, ``names``: :func:`name_groups`), the op that launched
    most of its time ("" when none is known; of ops with equal time, the one whose first
    call came last), by the name's and the op's codes (grouping by their texts, then
    sorting and reindexing by them, cost ~4x more)."""
    op = c["op"].to_numpy()
    if (name_code < 0).any() or pd.isna(op).any():  # missing texts: as pandas groups them
        return _top_op_by_text(c)
    known = np.flatnonzero(op != "")
    top = np.full(len(names), "", dtype=object)
    if len(known):
        op_code, ops = pd.factorize(op[known])
        pairs, at, _ = unique_rows([name_code[known], op_code])
        ns = np.zeros(len(pairs), dtype=np.int64)
        np.add.at(ns, at, c[S.DUR_NS].to_numpy(np.int64)[known])
        first = np.full(len(pairs), len(known))
        np.minimum.at(first, at, np.arange(len(known)))
        order = np.lexsort((first, ns, pairs[:, 0]))
        last = np.r_[pairs[order[1:], 0] != pairs[order[:-1], 0], True]  # each name's top
        top[pairs[order[last], 0]] = ops[pairs[order[last], 1]]
    return pd.Series(top, index=names)


def _top_op_by_text(c: pd.DataFrame) -> pd.Series:
    names = pd.unique(c[S.NAME])
    by_op = c[c["op"] != ""].groupby([S.NAME, "op"], sort=False, observed=True)[S.DUR_NS].sum()
    if by_op.empty:
        return pd.Series("", index=names)
    top = by_op.reset_index().sort_values(S.DUR_NS, kind="stable").drop_duplicates(S.NAME, keep="last")
    return top.set_index(S.NAME)["op"].reindex(names).fillna("")


def rank_facts(rank: int, calls: pd.DataFrame, table: pd.DataFrame, n_steps: int,
               step_ns: float, peak: DevicePeak | None) -> dict:
    """What the roofline findings need of one rank, per used step (ns, bytes)."""
    bound_ns = {b: float(table.loc[table["bound"] == b, "kernel_ms_per_step"].sum() * 1e6)
                for b in BOUNDS}
    memory = calls[calls["bound"] == "memory"]
    by_op = memory.groupby(["op", "family"])[S.DUR_NS].sum().sort_values(ascending=False)
    families = memory.groupby("family")[S.DUR_NS].sum() / n_steps
    nbytes = float(np.nansum(calls["read_bytes"] + calls["write_bytes"])) / n_steps
    return {RANK: rank, "device_model": peak.key if peak else "", "steps": n_steps,
            "step_ns": float(step_ns), "bound_ns": bound_ns,
            "peak_gbps": peak.mem_bw_tbps * 1e3 if peak else np.nan,
            "memory_gbps": _rate(memory), "memory_ops": [
                [str(op or "(unknown op)"), str(fam), float(ns) / n_steps]
                for (op, fam), ns in by_op.head(TOP_OPS).items()],
            "memory_families_ns": {str(f or "other"): float(v) for f, v in families.items()},
            "runs": fusion_runs(calls, n_steps), "est_dram_gbps": nbytes / step_ns
            if step_ns else np.nan,
            "conv_ns": float(calls.loc[calls[S.SUBCLASS] == "conv", S.DUR_NS].sum()) / n_steps}


def _rate(calls: pd.DataFrame) -> float:
    """GB/s the calls reached on the bytes they are estimated to move."""
    nbytes = calls["read_bytes"] + calls["write_bytes"]
    known = np.isfinite(nbytes)
    ns = float(calls.loc[known, S.DUR_NS].sum())
    return float(nbytes[known].sum()) / ns if ns else np.nan


def combine_roofline(parts: list[dict], nvml: pd.DataFrame | None = None,
                     th: Thresholds = DEFAULT) -> Result:
    """The ``roofline`` table over every GPU rank's :func:`rank_roofline` (short names given
    across ranks), and the ranks' facts with NVML's GPM DRAM bandwidth beside the estimate."""
    tables = [p["table"] for p in parts if len(p["table"])]
    table = pd.concat(tables, ignore_index=True) if tables else empty(ROOFLINE_COLUMNS)
    if len(table):
        names = table["kernel"].astype(str)
        unique = list(dict.fromkeys(names))
        short = dict(zip(unique, short_kernel_names(unique)))
        table["short_name"] = names.map(short)
    gpm = {} if nvml is None or nvml.empty else dict(zip(nvml[RANK], nvml["gpm_dram_bw_pct"]))
    facts = []
    for p in parts:
        f = dict(p["facts"])
        f["estimated_dram_bw_pct"] = 100 * f["est_dram_gbps"] / f["peak_gbps"]
        f["gpm_dram_bw_pct"] = float(gpm.get(f[RANK], np.nan))
        facts.append(f)
    return Result(tables={"roofline": table[list(ROOFLINE_COLUMNS)]},
                  facts={"topic": "roofline", "thresholds": th, "ranks": facts})
