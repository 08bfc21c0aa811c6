"""The report's columns of MFU, HFU and activation recompute (the efficiency section's peak
and HFU columns with their definitions, and the recompute section's table), as display
strings with units; :mod:`profkit.analyzers.report.sections` lays them out."""

from __future__ import annotations

import pandas as pd
from profkit.analyzers import units as U

RECOMPUTE_NOTE = ("recompute: GPU time of the kernels launched by forward ops inside backward "
                  "ranges (checkpointing); peak without: the allocator's peak allocated plus "
                  "the activations the recompute rebuilds")


def with_hfu(eff: pd.DataFrame, cols: dict, fmts: dict, notes: list) -> tuple:
    """The efficiency columns with the peak MFU is judged against, HFU where activation
    recompute makes it differ from MFU, and the definitions (docs/analysis.md)."""
    if "mfu_precision" not in eff:
        return cols, fmts, notes
    peaks = [f"{p} {U.tflops(v)}" for p, v in zip(eff["mfu_precision"].fillna(""),
                                                   eff["peak_tflops"])]
    cols = {**cols, "peak": pd.Series(peaks, index=eff.index)}
    fmts = {**fmts, "peak": lambda v: v if isinstance(v, str) else U.MISSING, "HFU": U.pct}
    notes = notes + ["MFU: model FLOPs / (step time x peak), the peak the dense one of the "
                     "fastest precision the step's GEMMs could use on the device (16-bit, or "
                     "fp8 where they run in fp8)"]
    if (eff["recompute_flops"].fillna(0) > 0).any():
        cols["HFU"] = eff["hfu"]
        notes.append("HFU: every executed FLOP, activation recompute included, over the same "
                     "peak; MFU leaves the recompute out")
    return cols, fmts, notes


def recompute_table(rc: pd.DataFrame) -> pd.DataFrame:
    """One row per rank of the ``recompute`` table, in display strings."""
    return pd.DataFrame({
        "rank": rc["rank"].astype(int),
        "recompute": [U.ms_of_ns(v, "step") for v in rc["recompute_ns"]],
        "of GPU time": [U.pct(v) for v in rc["gpu_frac"]],
        "of step": [U.pct(v) for v in rc["step_frac"]],
        "regions/step": [U.number(round(v, 1)) for v in rc["regions"]],
        "of FLOPs": [U.pct(v) for v in rc["flop_frac"]],
        "activations": [_gb(v) for v in rc["activation_bytes"]],
        "peak without": [_gb(v) for v in rc["peak_without_bytes"]]})


def _gb(value) -> str:
    v = U.finite(value)
    return U.MISSING if v is None else f"{v / 1e9:.1f} GB"
