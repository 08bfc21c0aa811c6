"""The change of an inference run by phase: time to first token (prefill) and time per
output token (decode), beside the change of the whole step.

Read from each side's ``inference_phases`` table (analyzers/measure/inference.py), for the
first rank present on both sides (inference is one GPU, or ranks alike under tensor
parallelism). Absent (None) when either side has no phases. A phase's change within
:data:`UNCHANGED_FRAC` reads "unchanged": one profiled step of ``generate`` moves by a few
percent from one sitting to the next.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

UNCHANGED_FRAC = 0.03
FIGURES = (  # phase, the column compared, how the text names it
    ("prefill", "ttft_ms", "time to first token"),
    ("decode", "tpot_ms", "per token"),
    ("mixed", "forward_ms", "per mixed forward"),
)


def _value(table: pd.DataFrame, rank: int, phase: str, column: str) -> float | None:
    rows = table[(table["rank"] == rank) & (table["phase"] == phase)]
    if rows.empty:
        return None
    value = float(rows[column].iloc[0])
    if not math.isfinite(value) and column == "ttft_ms":  # an engine's prefill: no request
        value = float(rows["forward_ms"].iloc[0])
    return value if math.isfinite(value) and value > 0 else None


def phase_change(base: pd.DataFrame, new: pd.DataFrame) -> dict[str, Any] | None:
    """Per phase on both sides: its figure on each side and the relative change, and a
    one-line ``text`` (``decode -44.6% per token (26.7 -> 14.8 ms), prefill -17.8% ...``);
    None when a side has no phases."""
    if base.empty or new.empty:
        return None
    both = sorted(set(base["rank"]) & set(new["rank"]))
    if not both:
        return None
    rank = int(both[0])
    out: dict[str, Any] = {"rank": rank, "phases": {}}
    said = []
    for phase, column, words in FIGURES:
        b, n = _value(base, rank, phase, column), _value(new, rank, phase, column)
        if b is None or n is None:
            continue
        change = n / b - 1.0
        out["phases"][phase] = {"figure": column, "base_ms": b, "new_ms": n,
                                "change_frac": change}
        if abs(change) < UNCHANGED_FRAC:
            said.append(f"{phase} unchanged {words} ({b:.3g} -> {n:.3g} ms)")
        else:
            said.append(f"{phase} {change:+.1%} {words} ({b:.3g} -> {n:.3g} ms)")
    if not said:
        return None
    share = _decode_share(out["phases"], base, new, rank)
    out["text"] = "; ".join(said) + (f"; {share}" if share else "")
    return out


def _decode_share(phases: dict, base: pd.DataFrame, new: pd.DataFrame, rank: int) -> str:
    """Which phase the step's change is in, from each phase's time per step."""
    deltas = {}
    for phase in ("prefill", "decode"):
        b, n = _value(base, rank, phase, "time_ms"), _value(new, rank, phase, "time_ms")
        if b is not None and n is not None:
            deltas[phase] = n - b
    total = sum(deltas.values())
    if len(deltas) < 2 or abs(total) <= 0:
        return ""
    top = max(deltas, key=lambda p: abs(deltas[p]))
    return f"{deltas[top] / total:.0%} of the step's change is in {top}"


def attach(diff, base, new) -> None:
    """Add the change by phase to ``diff.verdict['phases']`` when both analyses have
    phases; no key otherwise."""
    change = phase_change(base.table("inference_phases"), new.table("inference_phases"))
    if change is not None:
        diff.verdict["phases"] = change
