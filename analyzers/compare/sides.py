"""What the diff reads of one analysis: its used rank-steps, per-name totals, devices,
whether it trains, and the few facts of its tables the nature of a change is told from."""

from __future__ import annotations

import re

import pandas as pd
from profkit.analyzers.measure.steps import USED
from profkit.analyzers.measure.tables import name_mask

from profkit import schema as S

BACKWARD_RE = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function|^Optimizer\.step")


def used_rank_steps(analysis) -> int:
    """Rank-steps behind the verdict (the per-step divisor of totals over used steps)."""
    steps = analysis.table("step_breakdown")
    return int(steps[USED].astype(bool).sum()) if len(steps) else 0


def per_name(analysis, table: str, column: str, by: str = S.NAME) -> pd.Series:
    """``column`` of ``table`` summed per ``by`` (a name), over the used steps."""
    t = analysis.table(table)
    if t.empty or by not in t.columns:
        return pd.Series(dtype=float)
    return t.groupby(t[by].astype(str))[column].sum().astype(float)


def per_step(analysis, table: str, column: str, by: str = S.NAME) -> pd.Series:
    """:func:`per_name` per used rank-step."""
    return per_name(analysis, table, column, by) / max(used_rank_steps(analysis), 1)


def devices(analysis) -> list[str]:
    """The GPU models the analysed ranks ran on (empty when the traces do not say)."""
    eff = analysis.table("efficiency")
    if eff.empty or "device_name" not in eff:
        return []
    return sorted({str(n) for n in eff["device_name"].dropna() if str(n).strip()})


def trains(analysis) -> bool | None:
    """Whether the used steps ran backward ops or optimizer steps (None: no CPU ops)."""
    ops = analysis.table("used_step_ops")
    if ops.empty:
        return None
    names = ops[S.NAME].astype("category")
    return bool(name_mask(names, BACKWARD_RE).any())
