"""The change of peak GPU memory between two analyses, beside the change of time.

Read from each side's ``memory_ranks`` table (``allocations``: the allocator's peaks over
the steps the verdict uses): per rank and device present on both sides, and for the run as
its largest rank-device (the one nearest out-of-memory). Absent (None), not zero, when
either side has no ``[memory]`` events: a trace captured without ``profile_memory=True``
says nothing about memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

KEYS = ("rank", "device")
KINDS = ("allocated", "reserved")
COLUMNS = ("rank", "device", "base_allocated_gb", "new_allocated_gb", "delta_allocated_gb",
           "allocated_change_frac", "base_reserved_gb", "new_reserved_gb",
           "delta_reserved_gb", "reserved_change_frac")


def _frac(base: float, new: float) -> float | None:
    return new / base - 1.0 if base > 0 else None


def memory_table(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, device) on both sides: the peak allocated and reserved of each side in GB
    (decimal, as the reports print memory), their difference and relative change."""
    if base.empty or new.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    cols = [f"peak_{k}_bytes" for k in KINDS]
    both = base[[*KEYS, *cols]].merge(new[[*KEYS, *cols]], on=list(KEYS),
                                      suffixes=("_base", "_new"))
    out = both[list(KEYS)].astype(int).copy()
    for kind in KINDS:
        b = both[f"peak_{kind}_bytes_base"].to_numpy(np.float64)
        n = both[f"peak_{kind}_bytes_new"].to_numpy(np.float64)
        out[f"base_{kind}_gb"], out[f"new_{kind}_gb"] = b / 1e9, n / 1e9
        out[f"delta_{kind}_gb"] = (n - b) / 1e9
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{kind}_change_frac"] = np.where(b > 0, n / b - 1.0, np.nan)
    return out[list(COLUMNS)]


def memory_change(base: pd.DataFrame, new: pd.DataFrame,
                  verdict: dict[str, Any]) -> dict[str, Any] | None:
    """The run's peak memory on each side (its largest rank-device, allocated and reserved
    in bytes), their relative change, the step times beside it (from ``verdict``) and a
    one-line ``text``; None when either side has no memory rows."""
    if base.empty or new.empty:
        return None
    out: dict[str, Any] = {"over": "the largest rank-device of each run"}
    parts = []
    for kind in KINDS:
        b = int(base[f"peak_{kind}_bytes"].max())
        n = int(new[f"peak_{kind}_bytes"].max())
        change = _frac(b, n)
        out.update({f"base_peak_{kind}_bytes": b, f"new_peak_{kind}_bytes": n,
                    f"{kind}_change_frac": change})
        pct = "" if change is None else f", {change:+.1%}"
        parts.append(f"{kind} {b / 1e9:.2f} -> {n / 1e9:.2f} GB ({(n - b) / 1e9:+.2f} GB{pct})")
    text = "peak memory (largest rank): " + "; ".join(parts)
    base_ms, new_ms = verdict.get("base_step_ms"), verdict.get("new_step_ms")
    if base_ms and new_ms:
        out.update(base_step_ms=base_ms, new_step_ms=new_ms,
                   step_change_frac=new_ms / base_ms - 1.0)
        text += (f"; beside the median step {base_ms:.3f} -> {new_ms:.3f} ms "
                 f"({new_ms / base_ms - 1.0:+.1%})")
    out["text"] = text
    return out


def attach(diff, base, new) -> None:
    """Add the memory change to ``diff.verdict['memory']``, with its per-rank rows
    (:func:`memory_table`) as ``ranks``, when both analyses have memory rows; no key
    otherwise. Not in ``diff.tables``: those are the time's attribution, a delta_ms each."""
    b, n = base.table("memory_ranks"), new.table("memory_ranks")
    change = memory_change(b, n, diff.verdict)
    if change is None:
        return
    change["ranks"] = memory_table(b, n).to_dict("records")
    diff.verdict["memory"] = change
