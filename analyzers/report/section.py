"""What a report section is (:class:`Section`), where a measurement is shown
(:class:`Shown`), and the few helpers every section module shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.analyze import Analysis

MAX_RANK_ROWS = 16  # larger runs get a per-part distribution instead of a row per rank
TOP_ROWS = 10  # rows of the kernel, op and collective tables


@dataclass
class Section:
    title: str
    table: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    clip: tuple[str, ...] = ()  # name columns the text report may cut to fit the terminal
    fold: tuple[str, ...] = ()  # descriptive columns whose cells may wrap over lines there


@dataclass(frozen=True)
class Shown:
    """A measurement's place in the report: its section (text, Markdown, HTML) and, where
    the JSON report carries its rows, their key and the rows. ``measurement``: its name in
    :data:`profkit.analyzers.measurements.MEASUREMENTS`."""

    measurement: str
    section: Callable[[Analysis], Section | None] | None = None
    json_key: str = ""
    json_rows: Callable[[Analysis], list[dict[str, Any]]] | None = None
    json_when_empty: bool = True  # False: no key at all when there are no rows


def safe_pick(pick, values: pd.Series) -> float:
    v = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    return float(pick(v)) if np.isfinite(v).any() else float("nan")
