"""Figures that break physics are notes, not numbers.

No measurement gives a bus bandwidth above the link's peak, a copy faster than its link, or
a utilisation (MFU, GPU busy) above 100%: such a figure comes from times or sizes that
cannot be trusted (timestamps that collapsed onto one instant, durations clipped, hostile
values). Each is set to NaN in its table, so reports show '-' and findings never quote it,
and one note per kind says how many, the worst value and why; the analysis' notes carry
them. A saving larger than the step it saves from is dropped from its finding the same way
(:mod:`profkit.analyzers.findings.consolidate`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.result import Result

WHY = "the trace's times or sizes cannot be trusted"


def _above(values: pd.Series, limit) -> np.ndarray:
    """Rows whose value is infinite or above ``limit`` (a number or a Series; NaN: none)."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    lim = np.asarray(pd.to_numeric(limit, errors="coerce"), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.isinf(v) | (np.isfinite(lim) & (v > lim))


def collectives_within_link(tables: dict[str, pd.DataFrame], link_gbps: float) -> list[str]:
    """Collectives whose bus bandwidth is infinite or above the link's per-direction peak
    (GB/s; NaN when unknown): their algbw and busbw become NaN."""
    coll = tables.get("collectives")
    if coll is None or coll.empty or "busbw_gbps" not in coll:
        return []
    bad = _above(coll["busbw_gbps"], link_gbps)
    if not bad.any():
        return []
    worst = float(coll.loc[bad, "busbw_gbps"].max())
    coll.loc[bad, ["algbw_gbps", "busbw_gbps"]] = np.nan
    limit = f"the link's {link_gbps:.0f} GB/s peak" if np.isfinite(link_gbps) else "any link"
    return [f"{int(bad.sum())} collective(s) with a bus bandwidth above {limit} (up to "
            f"{worst:.0f} GB/s): {WHY}; their bandwidth is not shown"]


def transfers_within_link(table: pd.DataFrame) -> list[str]:
    """Copies whose achieved GB/s is infinite or above their link's peak: their achieved
    GB/s and share of the peak become NaN."""
    if table is None or table.empty or "achieved_gbps" not in table:
        return []
    bad = _above(table["achieved_gbps"], table["peak_gbps"])
    if not bad.any():
        return []
    rows = table.loc[bad]
    worst = rows.loc[rows["achieved_gbps"].idxmax()]
    table.loc[bad, ["achieved_gbps", "peak_frac"]] = np.nan
    return [f"{int(bad.sum())} copy row(s) faster than their link (up to "
            f"{float(worst['achieved_gbps']):.0f} GB/s {worst['direction']} against "
            f"{float(worst['peak_gbps']):.0f} GB/s): {WHY}; their bandwidth is not shown"]


def efficiency_within_peak(result: Result) -> list[str]:
    """MFU or GPU busy above 100% in an efficiency result: MFU (with the achieved TFLOP/s
    behind it) or GPU busy become NaN, in its table and in the rows its findings are judged
    from (``facts["efficiency_rows"]``)."""
    table = result.tables.get("efficiency")
    if table is None or table.empty:
        return []
    notes = []
    for column, also, label in (("mfu", "achieved_tflops", "MFU"), ("gpu_util", None, "GPU busy")):
        if column not in table:
            continue
        bad = _above(table[column], 1.0)
        if not bad.any():
            continue
        worst = float(table.loc[bad, column].max())
        ranks = [int(r) for r in table.loc[bad, "rank"]]
        dropped = [c for c in (column, also) if c]
        table.loc[bad, dropped] = np.nan
        for row in result.facts.get("efficiency_rows") or []:
            if row.get("rank") in ranks:
                row.update(dict.fromkeys(dropped, np.nan))
        notes.append(f"rank {', '.join(map(str, ranks))}: {label} above 100% ({worst:.0%}): "
                     f"{WHY} (FLOP counts or times); not shown")
    return notes


def saving_beyond_step(saving_ms: float, step_ms: float) -> str | None:
    """Why a saving cannot be trusted (more than its whole step, or not a number), or None."""
    if not np.isfinite(saving_ms) or saving_ms < 0:
        return f"the estimate ({saving_ms} ms/step) is not a time: {WHY}"
    if np.isfinite(step_ms) and saving_ms > step_ms:
        return (f"the estimate ({saving_ms:.2f} ms/step) exceeds the step it saves from "
                f"({step_ms:.2f} ms): {WHY}")
    return None
