"""The report's section on a DeepSpeed ZeRO-3 run (:mod:`profkit.analyzers.measure.zero3`):
per rank, its hooked module forwards and its all-gathers and reduce-scatters per step, by
phase, with their sizes in elements (the unit of DeepSpeed's bucket knobs), and the GPU's
wait on the host inside ZeRO-3's code."""

from __future__ import annotations

from typing import Any

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.measure.zero3 import CALLS_TABLE, RANKS_TABLE
from profkit.analyzers.report.section import MAX_RANK_ROWS, Section


def elements(n: Any) -> str:
    """``3.15 M el``: a buffer in elements, 3 significant digits."""
    v = U.finite(n)
    if v is None:
        return U.MISSING
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit} el"
    return f"{v:.0f} el"


def _calls(count: float, total: float) -> str:
    return "0" if not count else f"{U.number(count)} ({elements(total)})"


def zero3_section(a: Analysis) -> Section | None:
    t = a.table(RANKS_TABLE)
    if t.empty:
        return None
    rows = [{"rank": int(r.rank), "module forwards": U.number(r.hooked_forwards_per_step),
             "all-gathers forward": _calls(r.all_gathers_forward, r.all_gather_elements_forward),
             "backward": _calls(r.all_gathers_backward, r.all_gather_elements_backward),
             "after backward": _calls(r.all_gathers_after_backward,
                                      r.all_gather_elements_after_backward),
             "reduce-scatters": _calls(r.reduce_scatters, r.reduce_scatter_elements),
             "exposed": U.ms(r.exposed_comm_ms_per_step, "step"),
             "hook wait": U.ms(getattr(r, "hook_idle_ms_per_step", None), "step")}
            for r in t.head(MAX_RANK_ROWS).itertuples(index=False)]
    notes = ["per step; calls (elements in all): an all-gather's gathered buffer, a "
             "reduce-scatter's unreduced one, in elements as stage3_prefetch_bucket_size and "
             "reduce_bucket_size count them",
             "after backward: DeepSpeed's gradient epilogue, the optimizer step and the "
             "re-gather of the persistent parameters (stage3_param_persistence_threshold) it "
             "updated"]
    calls = a.table(CALLS_TABLE)
    gathers = calls[calls["kind"] == "all_gather"] if len(calls) else calls
    if len(gathers):
        lo, hi = gathers["elements"].min(), gathers["elements"].max()
        notes.append(f"all-gathers of {elements(lo)} to {elements(hi)} each")
    if t["exposed_comm_ms_per_step"].isna().all():
        notes.append("no GPU events: calls and sizes only, no exposed time")
    if len(t) > MAX_RANK_ROWS:
        notes.append(f"the first {MAX_RANK_ROWS} of {len(t)} ranks")
    notes.append("hook wait: the GPU idle while the host runs ZeRO-3's autograd "
                 "Functions and fetches (AccumulateGrad and unrecorded Python left out); where "
                 "the GPU waits on the host, the launch and host-work findings name them")
    return Section("DeepSpeed ZeRO-3 (sharded parameters, gradients and optimizer state)",
                   pd.DataFrame(rows), notes)


def zero3_rows(a: Analysis) -> list[dict[str, Any]]:
    """The JSON report's rows: one per rank, as measured."""
    return a.table(RANKS_TABLE).to_dict("records")
