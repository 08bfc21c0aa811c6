"""Where the time went, before and after: per used step (and rank), by breakdown part, by
kernel group (``gemm``, ``attention``, ``elementwise``, ``memcpy HtoD``, ...), by kernel and
by CPU op (self time), largest change first.

Times are ms per step (``base_ms``, ``new_ms``, ``delta_ms``); when the diff is judged per
sample or token (another batch) each table also has the time per item in microseconds
(``base_us_per_sample``, ...), and is ordered by that. Rows whose change rounds to 0.000 in
the unit judged are left out (a run against itself attributes nothing to kernels or ops),
except the breakdown parts, which keep every part either run spent time in: they are the
step's composition, base against new. Kernels keep their
full name (``name``) beside the short one ``analyze`` shows (``short_name``,
:func:`profkit.classify.names.short_kernel_names`).
"""

from __future__ import annotations

import pandas as pd
from profkit.analyzers.compare.sides import per_step
from profkit.analyzers.measure.steps import USED
from profkit.analyzers.parts import PARTS

from profkit.classify.names import short_kernel_names

TOP = 15
DIGITS = 3  # a change that rounds to 0 at this many decimals is no change


def item_columns(unit: str) -> tuple[str, str, str]:
    return f"base_us_per_{unit}", f"new_us_per_{unit}", f"delta_us_per_{unit}"


def delta_table(base: pd.Series, new: pd.Series, label: str, basis: dict | None = None,
                calls: tuple[pd.Series, pd.Series] | None = None,
                keep_unchanged: bool = False) -> pd.DataFrame:
    """base / new / delta in ms per step (from ns per step), per item when ``basis`` (its
    ``unit`` and ``items`` per step of each side), calls per step when ``calls``; rows
    whose change rounds to 0 left out unless ``keep_unchanged`` (then only rows that are 0
    on both sides)."""
    table = pd.DataFrame({"base_ms": base / 1e6, "new_ms": new / 1e6}).fillna(0.0)
    table["delta_ms"] = table["new_ms"] - table["base_ms"]
    judged = "delta_ms"
    if basis is not None:
        cols = item_columns(basis["unit"])
        items = basis["items"]
        table[cols[0]] = table["base_ms"] * 1e3 / items[0]
        table[cols[1]] = table["new_ms"] * 1e3 / items[1]
        table[cols[2]] = table[cols[1]] - table[cols[0]]
        judged = cols[2]
    if calls is not None:
        table["base_calls"], table["new_calls"] = (c.reindex(table.index).fillna(0.0) for c in calls)
    table.index.name = label
    shown = (table[["base_ms", "new_ms"]].round(DIGITS) != 0).any(axis=1) if keep_unchanged \
        else table[judged].round(DIGITS) != 0
    table = table[shown]
    order = table[judged].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].head(TOP).reset_index()


def used_parts(analysis) -> pd.Series:
    """Mean ns per used rank-step of each breakdown part."""
    steps = analysis.table("step_breakdown")
    if steps.empty:
        return pd.Series(0.0, index=list(PARTS))
    return steps.loc[steps[USED].astype(bool), list(PARTS)].mean()


def attribution(base, new, basis: dict | None = None) -> dict[str, pd.DataFrame]:
    """``diff_parts`` (breakdown parts), ``diff_kernel_groups``, ``diff_kernels`` (GPU ops,
    with ``short_name``) and ``diff_ops`` (CPU ops, self time); see the module doc."""
    tables = {"diff_parts": delta_table(used_parts(base), used_parts(new), "part", basis,
                                        keep_unchanged=True)}
    sources = (("diff_kernel_groups", "used_step_kernels", "total_ns", "group"),
               ("diff_kernels", "used_step_kernels", "total_ns", "name"),
               ("diff_ops", "used_step_ops", "self_ns", "name"))
    for name, source, column, by in sources:
        b, n = per_step(base, source, column, by), per_step(new, source, column, by)
        if not (len(b) or len(n)):
            continue
        calls = per_step(base, source, "count", by), per_step(new, source, "count", by)
        tables[name] = delta_table(b, n, "group" if by == "group" else "name", basis, calls)
    kernels = tables.get("diff_kernels")
    if kernels is not None:
        kernels.insert(1, "short_name", short_kernel_names(kernels["name"].astype(str).tolist()))
    return tables
