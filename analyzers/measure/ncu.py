"""Nsight Compute's counters beside the trace's kernels: which kernels ``profkit ncu``
measures, and the table joining what it measured to the analysis' kernels.

Table ``ncu_kernels`` (one row per kernel of ``top_kernels`` that ncu measured, in
``top_kernels`` order; medians over its measured launches):

- ``kernel`` (the trace's name), ``short_name``, ``top_rank`` (1 = most kernel time),
  ``share`` (of all kernel time), ``ncu_kernel`` (ncu's name for it), ``launches``;
- ``trace_us`` (mean duration in the trace) beside ``ncu_us`` (``gpu__time_duration``);
- DRAM: ``dram_bytes`` per launch (read + write), ``dram_pct`` of peak, ``dram_gbps``;
- ``mem_pct`` (busiest memory unit), ``sm_pct``, ``tensor_pct`` (tensor pipe),
  ``fma_pct``, ``occupancy_pct`` (achieved), ``l2_hit_pct``;
- ``top_stalls``: the three largest warp-stall reasons with their values;
- ``measured_bound``: memory, math or latency from the counters (busiest side, and below
  ``ncu_roof_frac`` of its peak: latency); unknown without them;
- from the ``roofline`` table when the analysis has one: ``est_bytes`` per launch
  (bytes per step / calls per step), ``bytes_ratio`` (measured / estimated), ``est_bound``.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.tables import empty
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.classify.kernelkey import match_names
from profkit.classify.names import short_kernel_names
from profkit.trace.ncu import STALL_PREFIX

NCU_COLUMNS = ("kernel", "short_name", "top_rank", "share", "ncu_kernel", "launches",
               "trace_us", "ncu_us", "dram_bytes", "dram_pct", "dram_gbps", "mem_pct",
               "sm_pct", "tensor_pct", "fma_pct", "occupancy_pct", "l2_hit_pct",
               "top_stalls", "measured_bound", "est_bytes", "bytes_ratio", "est_bound")
MEDIAN_COLUMNS = ("duration_ns", "dram_read_bytes", "dram_write_bytes", "dram_bytes",
                  "dram_pct", "mem_pct", "sm_pct", "tensor_pct", "fma_pct", "occupancy_pct",
                  "l2_hit_pct")
TOP_STALLS = 3
NOT_MEASURED = ("communication",)  # kernel replay of a collective would hang its peers


def rank_steps(efficiency: pd.DataFrame) -> int:
    """Rank-steps the kernel totals cover: each GPU rank's recorded steps (at least one)."""
    if efficiency is None or efficiency.empty or "steps" not in efficiency:
        return 1
    return max(int(np.maximum(efficiency["steps"].fillna(0).to_numpy(), 1).sum()), 1)


def select_kernels(top: pd.DataFrame, steps: int, max_kernels: int,
                   patterns: list[str] | tuple[str, ...] = ()) -> list[dict]:
    """The kernels to measure: the ``max_kernels`` with the most time (communication
    kernels left out), or those whose name matches one of ``patterns`` (regular
    expressions, case-insensitive), each ``{"name", "calls_per_step", "mean_ns", "share"}``."""
    if top is None or top.empty:
        return []
    k = top[~top["cls"].astype(str).isin(NOT_MEASURED)]
    if patterns:
        names = k["name"].astype(str)
        shorts = pd.Series(short_kernel_names(names.tolist()), index=k.index)
        hit = np.zeros(len(k), dtype=bool)
        for p in patterns:
            rx = re.compile(p, re.IGNORECASE)
            hit |= names.map(lambda n, rx=rx: bool(rx.search(n))).to_numpy()
            hit |= shorts.map(lambda n, rx=rx: bool(rx.search(n))).to_numpy()
        k = k[hit]
    k = k.head(max_kernels)
    return [{"name": str(r["name"]), "calls_per_step": round(float(r["count"]) / steps, 3),
             "mean_ns": float(r["mean_ns"]), "share": float(r["share"])}
            for r in k.to_dict("records")]


def join_counters(top: pd.DataFrame, counters: pd.DataFrame | None,
                  roofline: pd.DataFrame | None = None,
                  th: Thresholds = DEFAULT) -> Result:
    """Table ``ncu_kernels`` (module docstring) and facts: launches measured, and those
    whose kernel the trace does not name (``unmatched``)."""
    facts = {"topic": "ncu", "thresholds": th, "launches": 0, "unmatched": []}
    if counters is None or counters.empty:
        return Result(facts=facts)
    if top is None or top.empty:
        return Result(tables={"ncu_kernels": empty(NCU_COLUMNS)}, facts=facts)
    names = top["name"].astype(str).tolist()
    found = match_names(counters["kernel"].astype(str), names)
    trace = counters["kernel"].astype(str).map(found).fillna("")
    if "trace_kernel" in counters:  # the capture's own match, for a name matched no longer
        hint = counters["trace_kernel"].astype(str)
        trace = trace.where((trace != "") | ~hint.isin(names), hint)
    measured = counters.assign(trace_kernel=trace.to_numpy())
    facts["launches"] = len(measured)
    facts["unmatched"] = sorted(set(measured.loc[measured["trace_kernel"] == "", "kernel"]))
    rows = [_row(i, r, measured[measured["trace_kernel"] == r["name"]], th)
            for i, r in enumerate(top.to_dict("records"), start=1)
            if (measured["trace_kernel"] == r["name"]).any()]
    table = pd.DataFrame(rows, columns=list(NCU_COLUMNS)) if rows else empty(NCU_COLUMNS)
    if len(table):
        table["short_name"] = short_kernel_names(table["kernel"].tolist())
        table = _with_estimates(table, roofline)
    return Result(tables={"ncu_kernels": table}, facts=facts)


def _row(top_rank: int, kernel: dict, launches: pd.DataFrame, th: Thresholds) -> dict:
    med = {c: _median(launches, c) for c in MEDIAN_COLUMNS}
    split = med["dram_read_bytes"] + med["dram_write_bytes"]
    dram = split if np.isfinite(split) else med["dram_bytes"]
    tensor = med["tensor_pct"]
    return {"kernel": kernel["name"], "top_rank": top_rank, "share": kernel.get("share"),
            "ncu_kernel": str(launches["kernel"].iloc[0]), "launches": len(launches),
            "trace_us": kernel["mean_ns"] / 1e3, "ncu_us": med["duration_ns"] / 1e3,
            "dram_bytes": dram, "dram_pct": med["dram_pct"],
            "dram_gbps": dram / med["duration_ns"] if med["duration_ns"] > 0 else np.nan,
            "mem_pct": med["mem_pct"], "sm_pct": med["sm_pct"], "tensor_pct": tensor,
            "fma_pct": med["fma_pct"], "occupancy_pct": med["occupancy_pct"],
            "l2_hit_pct": med["l2_hit_pct"], "top_stalls": _stalls(launches),
            "measured_bound": measured_bound(med["dram_pct"], med["mem_pct"], med["sm_pct"],
                                             tensor, med["fma_pct"], th)}


def _median(frame: pd.DataFrame, col: str) -> float:
    if col not in frame:
        return np.nan
    values = pd.to_numeric(frame[col], errors="coerce").dropna()
    return float(values.median()) if len(values) else np.nan


def _stalls(launches: pd.DataFrame) -> str:
    cols = [c for c in launches.columns if c.startswith(STALL_PREFIX)]
    means = launches[cols].apply(pd.to_numeric, errors="coerce").median().dropna() \
        if cols else pd.Series(dtype=float)
    top = means[means > 0].sort_values(ascending=False, kind="stable").head(TOP_STALLS)
    return ", ".join(f"{c[len(STALL_PREFIX):]} {v:.3g}" for c, v in top.items())


def measured_bound(dram_pct: float, mem_pct: float, sm_pct: float, tensor_pct: float,
                   fma_pct: float, th: Thresholds = DEFAULT) -> str:
    """memory / math / latency from speed-of-light percentages (unknown without them)."""
    memory = np.nanmax([dram_pct, mem_pct, -1.0])
    math = np.nanmax([sm_pct, tensor_pct, fma_pct, -1.0])
    if memory < 0 and math < 0:
        return "unknown"
    if max(memory, math) < 100 * th.ncu_roof_frac:
        return "latency"
    return "memory" if memory >= math else "math"


def _with_estimates(table: pd.DataFrame, roofline: pd.DataFrame | None) -> pd.DataFrame:
    """The roofline table's shape-based bytes and bound beside the measured ones."""
    need = {"kernel", "bytes_per_step", "calls_per_step", "bound"}
    if roofline is None or roofline.empty or not need <= set(roofline.columns):
        return table
    est = roofline.drop_duplicates("kernel").set_index("kernel")
    calls = pd.to_numeric(est["calls_per_step"], errors="coerce")
    per_call = pd.to_numeric(est["bytes_per_step"], errors="coerce") / calls.where(calls > 0)
    table["est_bytes"] = table["kernel"].map(per_call).astype("float64")
    table["bytes_ratio"] = table["dram_bytes"] / table["est_bytes"].where(table["est_bytes"] > 0)
    table["est_bound"] = table["kernel"].map(est["bound"]).astype(object)
    return table
