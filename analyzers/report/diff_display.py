"""How a diff's tables read in text, Markdown and HTML: the step parts by the labels
``analyze`` gives them (:data:`~profkit.analyzers.parts.PART_TABLE`: ``launch overhead``,
not ``cpu_launch``), headers in words with their unit, times with the precision their size
needs and shares in %, every cell a display string. The JSON keeps its keys and full values
(:func:`~profkit.analyzers.report.diff_text.diff_to_json`).

Times: three decimals under 10 (ms or us), two under 100, one above: the attribution leaves
out a change that rounds to 0.000 ms, so every change shown is visible at that precision,
and no column mixes ``0.06288`` with ``0.001685``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from profkit.analyzers.parts import part_label

# the columns of the attribution (after diff_text.shown) and of the memory table, in words
HEADERS = {"base_ms": "base ms", "new_ms": "new ms", "delta_ms": "change ms",
           "base_share": "base %", "new_share": "new %", "group": "kernel group",
           "calls": "calls per step", "rank": "rank", "device": "device"}
OP_TABLE = "diff_ops"


def time_cell(value: Any, signed: bool = False) -> str:
    """A time (ms or us) with the decimals its size needs (module doc); ``signed``: a
    change, with its sign (a change that rounds to zero reads ``0.000``)."""
    if value is None or not math.isfinite(float(value)):
        return "-"
    v = float(value)
    size = abs(v)
    digits = 1 if size >= 100 else 2 if size >= 10 else 3
    text = f"{v:.{digits}f}"
    if float(text) == 0:
        return f"{0:.{digits}f}"
    return f"{v:+.{digits}f}" if signed else text


def share_cell(frac: Any, signed: bool = False) -> str:
    """A fraction as a percentage with one decimal (``+83.1``)."""
    if frac is None or not math.isfinite(float(frac)):
        return "-"
    return f"{100 * float(frac):+.1f}" if signed else f"{100 * float(frac):.1f}"


def _header(column: str, table_name: str) -> str:
    if column == "name":
        return "op" if table_name == OP_TABLE else "kernel"
    if column.startswith("delta_us_per_"):
        return f"change us/{column.removeprefix('delta_us_per_')}"
    return HEADERS.get(column, column.replace("_", " "))


def attribution_cells(name: str, table: pd.DataFrame,
                      step_ms: tuple[float, float] | None = None) -> tuple[list[str], list[list[str]]]:
    """(headers, rows of display strings) of one attribution table as ``shown`` leaves it;
    with ``step_ms`` (the mean step of base and new: the sum of every part, as the parts
    cover the step) the parts table also gets each part's share of the step on each side."""
    table = table.copy()
    if "part" in table:
        table["part"] = [part_label(str(p)) for p in table["part"]]
        for side, total in zip(("base", "new"), step_ms or ()):
            table[f"{side}_share"] = table[f"{side}_ms"] / total if total > 0 else float("nan")
    columns = list(table.columns)
    rows = []
    for row in table.itertuples(index=False):
        cells = []
        for column, value in zip(columns, row):
            if column.endswith("_share"):
                cells.append(share_cell(value))
            elif column.startswith(("base_", "new_", "delta_")):
                cells.append(time_cell(value, signed=column.startswith("delta_")))
            else:
                cells.append(str(value))
        rows.append(cells)
    return [_header(c, name) for c in columns], rows


def _gb(v: Any, signed: bool = False) -> str:
    if v is None or not math.isfinite(float(v)):
        return "-"
    return f"{float(v):+.2f}" if signed else f"{float(v):.2f}"


def memory_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of the per-rank peak memory table (``verdict['memory']['ranks']``),
    read as the memory line reads: ``allocated GB`` as ``5.30 -> 9.70``, its change as
    ``+4.40 (+83.1%)``; the same for reserved."""
    headers = ["rank", "device"]
    for kind in ("allocated", "reserved"):
        headers += [f"{kind} GB", f"{kind} change GB (%)"]
    rows = []
    for r in table.to_dict("records"):
        row = [str(r["rank"]), str(r["device"])]
        for kind in ("allocated", "reserved"):
            frac = share_cell(r[f"{kind}_change_frac"], signed=True)
            row += [f"{_gb(r[f'base_{kind}_gb'])} -> {_gb(r[f'new_{kind}_gb'])}",
                    f"{_gb(r[f'delta_{kind}_gb'], signed=True)} ({frac}%)"]
        rows.append(row)
    return headers, rows


def markdown_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table of display strings: names left, numbers right-aligned."""
    numeric = [all(not r[c] or r[c][0] in "0123456789-+." for r in rows) and c > 0
               for c in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if n else "---" for n in numeric) + "|"]
    lines += ["| " + " | ".join(v.replace("|", "\\|") for v in r) + " |" for r in rows]
    return lines
