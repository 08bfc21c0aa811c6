"""Findings from Nsight Compute's counters (the ``ncu_kernels`` table of
:mod:`profkit.analyzers.measure.ncu`): what the hardware says bounds the kernels that take
the time, and where the shape-based estimate and the measurement disagree.

- ``hbm_roof``: memory-bound kernels moving bytes at the HBM roof; no kernel tuning helps,
  only fewer bytes (fusion, lower precision).
- ``memory_access``: kernels bound by memory (by their counters or by the estimate) far
  below the HBM roof: access pattern, layout, caching.
- ``tensor_cores``: math-bound kernels on the FP32 pipes with the tensor pipes idle.
- ``estimate_mismatch``: measured DRAM bytes per launch more than a factor away from the
  estimate's.

One finding per kind, naming its kernels (the largest share first); kernels below
``ncu_min_share_frac`` of kernel time are not judged.
"""

from __future__ import annotations

import math

import pandas as pd
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

MAX_NAMED = 3
WARNING_SHARE = 0.25  # kernels of a finding taking this share of kernel time: a warning


def ncu_findings(result: Result, th: Thresholds) -> list[Finding]:
    table = result.tables.get("ncu_kernels")
    if table is None or table.empty:
        return []
    k = table[pd.to_numeric(table["share"], errors="coerce").fillna(0) >= th.ncu_min_share_frac]
    return [f for f in (hbm_roof(k, th), memory_access(k, th), tensor_cores(k, th),
                        estimate_mismatch(k, th)) if f is not None]


def _num(frame: pd.DataFrame, col: str) -> pd.Series:
    if col not in frame:
        return pd.Series(math.nan, index=frame.index)
    return pd.to_numeric(frame[col], errors="coerce")


def _evidence(rows: pd.DataFrame, keys: tuple[str, ...]) -> dict:
    top = rows.sort_values("share", ascending=False, kind="stable")
    kernels = [{k: _plain(r.get(k)) for k in ("short_name", "kernel", "share", *keys)}
               for r in top.head(MAX_NAMED).to_dict("records")]
    return {"kernels": kernels, "count": len(rows), "share": round(float(rows["share"].sum()), 4),
            **{f"first_{k}": kernels[0][k] for k in ("short_name", *keys)}}


def _plain(v):
    if isinstance(v, float):
        return None if not math.isfinite(v) else round(v, 4)
    return v.item() if hasattr(v, "item") else v


def _severity(rows: pd.DataFrame) -> str:
    return "warning" if rows["share"].sum() >= WARNING_SHARE else "info"


def _named(rows: pd.DataFrame, text) -> str:
    top = rows.sort_values("share", ascending=False, kind="stable").head(MAX_NAMED)
    more = f" and {len(rows) - len(top)} more" if len(rows) > len(top) else ""
    return "; ".join(text(r) for r in top.to_dict("records")) + more


def _finding(category: str, rows: pd.DataFrame, keys: tuple[str, ...], describe,
             message: str, recommendation: str, severity: str | None = None,
             **values) -> Finding | None:
    """The finding naming ``rows`` (None when there are none). ``describe(row)`` names one
    kernel; ``message`` is formatted with ``n`` (the kernels), ``share`` (their share of
    kernel time), ``named`` (the largest, described) and ``values``; ``keys``: the columns
    of the evidence."""
    if rows.empty:
        return None
    named = _named(rows, describe)
    return Finding(
        category=category, severity=severity or _severity(rows),
        message=message.format(n=len(rows), share=rows["share"].sum(), named=named, **values),
        recommendation=recommendation, evidence=_evidence(rows, keys))


def hbm_roof(k: pd.DataFrame, th: Thresholds) -> Finding | None:
    roof = _num(k, "dram_pct") >= 100 * th.ncu_hbm_roof_frac
    return _finding(
        "hbm_roof", k[(k["measured_bound"] == "memory") & roof],
        ("dram_pct", "dram_gbps", "dram_bytes"),
        lambda r: f"{r['short_name']} {r['dram_pct']:.0f}% of DRAM peak "
                  f"({r['dram_gbps']:.0f} GB/s)",
        "{n} memory-bound kernel(s) with {share:.0%} of kernel time already move bytes at the "
        "HBM roof (Nsight Compute): {named}. Tuning them cannot make them faster.",
        "Move fewer bytes: fuse each chain of elementwise / normalisation ops into one kernel "
        "(torch.compile, fused norms and optimizers), keep activations in bf16/fp16, and "
        "recompute rather than store where cheap.")


def memory_access(k: pd.DataFrame, th: Thresholds) -> Finding | None:
    by_counters = k["measured_bound"] == "memory"
    by_estimate = (k["est_bound"] == "memory") & (k["measured_bound"] != "math") \
        if "est_bound" in k else False
    return _finding(
        "memory_access",
        k[(by_counters | by_estimate) & (_num(k, "dram_pct") < 100 * th.ncu_hbm_far_frac)],
        ("dram_pct", "l2_hit_pct", "top_stalls"),
        lambda r: f"{r['short_name']} {r['dram_pct']:.0f}% of DRAM peak, "
                  f"L2 hit {_pct(r.get('l2_hit_pct'))}, stalls: {r.get('top_stalls') or '-'}",
        "{n} memory-bound kernel(s) run far below the HBM roof (under {far:.0%} of DRAM "
        "peak): {named}. Their access pattern, not the bandwidth, limits them.",
        "Look at how they touch memory: uncoalesced or strided access (permute/transpose "
        "without .contiguous(), channels_last mismatches), small or scattered reads (gather, "
        "index), shapes that leave threads idle; Nsight Compute's Memory Workload Analysis of "
        "the report (ncu/report.ncu-rep) shows where.",
        far=th.ncu_hbm_far_frac)


def _pct(v) -> str:
    return f"{v:.0f}%" if isinstance(v, float) and math.isfinite(v) else "-"


def tensor_cores(k: pd.DataFrame, th: Thresholds) -> Finding | None:
    tensor = _num(k, "tensor_pct")
    return _finding(
        "tensor_cores",
        k[(k["measured_bound"] == "math") & (tensor.fillna(0) < 100 * th.ncu_tensor_idle_frac)
          & ((_num(k, "fma_pct") >= _num(k, "sm_pct") / 2) | _num(k, "fma_pct").isna())],
        ("sm_pct", "fma_pct", "tensor_pct"),
        lambda r: f"{r['short_name']} SM {_pct(r.get('sm_pct'))}, FP32 FMA "
                  f"pipe {_pct(r.get('fma_pct'))}, tensor pipe {_pct(r.get('tensor_pct'))}",
        "{n} math-bound kernel(s) with {share:.0%} of kernel time run on the FP32 pipes with "
        "the tensor cores idle: {named}.",
        "Run the matrix math in bf16/fp16 (torch.autocast) or allow TF32 "
        "(torch.set_float32_matmul_precision('high')): the tensor cores do it many times "
        "faster.")


def estimate_mismatch(k: pd.DataFrame, th: Thresholds) -> Finding | None:
    ratio = _num(k, "bytes_ratio")
    factor = th.ncu_bytes_factor
    return _finding(
        "estimate_mismatch", k[(ratio > factor) | (ratio < 1 / factor)],
        ("est_bytes", "dram_bytes", "bytes_ratio"),
        lambda r: f"{r['short_name']}: estimated {r['est_bytes'] / 1e6:.3g} MB per call, "
                  f"DRAM moved {r['dram_bytes'] / 1e6:.3g} MB ({r['bytes_ratio']:.2g}x)",
        "For {n} kernel(s) the shape-based estimate and Nsight Compute disagree on the bytes "
        "moved by more than {factor:g}x: {named}. Judge these kernels by the measurement.",
        "Fewer DRAM bytes than estimated: the data was reused from L2 (small tensors, "
        "broadcasts), so the kernel is less memory-bound than the roofline says. More: extra "
        "passes, workspace or reads the shapes do not show (check the op's recorded shapes "
        "and dtypes).",
        severity="info", factor=factor)
