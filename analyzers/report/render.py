"""An Analysis as text (for a terminal), Markdown (for a pull request) or the JSON contract
(``profkit.analysis/1``). Pure functions: Analysis in, string or dict out. Text and Markdown
live in :mod:`~profkit.analyzers.report.render_text`; this module is the one place callers import
renderers from."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from profkit.analyzers.analyze import SCHEMA, Analysis
from profkit.analyzers.parts import PARTS
from profkit.analyzers.report import sections as sec
from profkit.analyzers.report.header import MAX_STATUS_RANKS, json_header, problems, status_line
from profkit.analyzers.report.headline import json_block as headline_json
from profkit.analyzers.report.render_text import (
    grouped_findings,
    markdown_table,
    rank_table,
    saving_text,
    sorted_findings,
    to_markdown,
    to_text,
)
from profkit.analyzers.report.sections import MAX_RANK_ROWS, ROOFLINE_ROWS, kernel_rows

__all__ = ["MAX_RANK_ROWS", "MAX_STATUS_RANKS", "ROOFLINE_ROWS", "clean_json",
           "grouped_findings", "kernel_rows", "markdown_table", "problems", "rank_table",
           "saving_text", "sorted_findings", "status_line", "to_json", "to_markdown", "to_text"]


def clean_json(value: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(a: Analysis) -> dict[str, Any]:
    """The ``profkit.analysis/1`` document: ``run`` opens with the truth about the run
    (status, ranks analysed and missing, skipped files, notes, the problems --strict fails
    on); every evidence key is kept, ``top_kernels`` has each kernel's full name beside
    its short one, and ``roofline`` the kernels that take the most time per step (at most
    :data:`ROOFLINE_ROWS`; ``--tables`` writes them all); those rows, after the findings, are
    each measurement's in :data:`~profkit.analyzers.report.sections.SHOWN`."""
    ranks = a.table("rank_breakdown")
    rank_rows = [{
        "rank": int(r["rank"]), "steps": int(r["steps"]), "step_time_ms": float(r["step_time_ms"]),
        "breakdown": {p: float(r[p]) for p in PARTS}, "verdict": {"primary": r["primary"]},
        "communication_split": {"wait": float(r.get("communication_wait", 0.0)),
                                "transfer": float(r.get("communication_transfer", r["communication"]))},
        "comm_overlap_frac": r.get("comm_overlap_frac"),
    } for r in ranks.to_dict("records")]
    doc = {
        "schema": SCHEMA,
        "run": json_header(a.run),
        "verdict": a.verdict,
        **headline_json(a),  # biggest_win, combined_saving (analyzers/findings/combined.py)
        "ranks": rank_rows,
        "stragglers": a.stragglers,
        "findings": [f.as_dict() for f in sorted_findings(a)],
    }
    for shown in sec.SHOWN:  # each measurement's rows, in report order
        rows = shown.json_rows(a) if shown.json_rows is not None else []
        if rows or (shown.json_rows is not None and shown.json_when_empty):
            doc[shown.json_key] = rows
    return clean_json(doc)
