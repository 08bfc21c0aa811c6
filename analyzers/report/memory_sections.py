"""The report's memory sections: the allocator's peaks per rank (``allocations``), what
holds each peak (``peak_live``) and the activation recompute that trades time for memory
(``recompute``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.report.mfu_columns import RECOMPUTE_NOTE, recompute_table
from profkit.analyzers.report.section import MAX_RANK_ROWS, TOP_ROWS, Section, safe_pick


def recompute_section(a: Analysis) -> Section | None:
    """Activation recompute per rank: its GPU time per step and its shares."""
    rc = a.table("recompute")
    return None if rc.empty else Section(
        "Activation recompute (forward ops run again in the backward pass)",
        recompute_table(rc).head(MAX_RANK_ROWS), [RECOMPUTE_NOTE])


def _gb(value) -> str:
    """Bytes as GB with one decimal (decimal, as the findings' evidence and the NVML memory
    finding print them); '-' when unknown."""
    v = U.finite(value)
    return U.MISSING if v is None else f"{v / 1e9:.1f} GB"


def memory_section(a: Analysis) -> Section | None:
    """The allocator's peaks per rank over the steps the verdict uses (``allocations``)."""
    mem = a.table("memory_ranks")
    if mem.empty:
        return None
    cols = {"peak allocated": (mem["peak_allocated_bytes"], _gb),
            "peak reserved": (mem["peak_reserved_bytes"], _gb),
            "capacity": (mem["capacity_bytes"], _gb), "% of capacity": (mem["peak_frac"], U.pct),
            "resident": (mem["resident_bytes"], _gb),
            "transient": (mem["transient_bytes"], _gb)}
    notes = ["PyTorch's caching allocator (the trace's [memory] events): reserved is what it "
             "holds from the driver, allocated what live tensors use; % of capacity is reserved; "
             "resident: allocated when a step starts, transient: what comes and goes in it"]
    if len(mem) <= MAX_RANK_ROWS:
        table = pd.DataFrame({"rank": mem["rank"].astype(int), "device": mem["device"].astype(int)})
        for name, (values, fmt) in cols.items():
            table[name] = [fmt(v) for v in values]
        return Section("Memory (per rank)", table, notes)
    rows = [{"over ranks": label, **{name: fmt(safe_pick(pick, values))
                                     for name, (values, fmt) in cols.items()}}
            for label, pick in (("min", np.nanmin), ("median", np.nanmedian), ("max", np.nanmax))]
    return Section(f"Memory (spread over {len(mem)} rank devices)", pd.DataFrame(rows), notes)


PEAK_ROWS = 5  # the largest holders of each rank's peak the text report shows


def peak_live_section(a: Analysis) -> Section | None:
    """What holds each rank's allocated peak: its largest live allocations by the op that
    made them (``peak_live``); every row is in --tables (memory_live)."""
    live, peak = a.table("memory_live"), a.table("memory_peak")
    if live.empty:
        return None
    top = live.sort_values(["rank", "device", "live_bytes"], ascending=[True, True, False])
    top = top.groupby(["rank", "device"], sort=False).head(PEAK_ROWS)
    if top["rank"].nunique() > MAX_RANK_ROWS:  # many ranks: the largest holders of any
        top = top.nlargest(TOP_ROWS, "live_bytes")
    table = pd.DataFrame({
        "rank": top["rank"].astype(int), "op": top["op"].astype(str),
        "annotation": top["annotation"].astype(str).replace("", U.MISSING),
        "live": [_gb(v) for v in top["live_bytes"]], "allocations": top["count"].astype(int),
        "since": np.where(top["allocated_before_step"].astype(bool), "earlier", "this step")})
    running = "; ".join(f"rank {int(r['rank'])}: {r['op']} at {r['allocated_bytes'] / 1e9:.1f} GB"
                        f" (step {int(r['step'])})" for r in peak.head(4).to_dict("records"))
    return Section("At the peak (live allocations by the op that made them)", table,
                   [f"op running at the peak: {running}" if running else "",
                    "since: allocated in the peak's step or before it (resident); all rows "
                    "in --tables (memory_live)"], fold=("op",))
