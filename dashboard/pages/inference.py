"""The Overview's inference section, for a run whose analysis found inference phases
(``inference_phases``, analyzers/measure/inference.py): time to first token, time per output
token (median, with its p10-p90 spread), tokens per second and the batch, decode's GPU busy
and the part holding it, decode's HBM use and prefill's MFU.

Each value is the text report's own (:mod:`profkit.analyzers.report.inference_sections`:
the same rounding, the same ``>=`` rule for a lower-bound HBM figure, the same part), for
the same rank: the first with phases. A run without phases gets no section (None).
"""

from __future__ import annotations

import math

import pandas as pd
from dash import html
from profkit.analyzers import units as U
from profkit.analyzers.parts import part_label
from profkit.analyzers.report.inference_sections import hbm_text, spread_text, top_part
from profkit.dashboard import ids
from profkit.dashboard.ui import components as C

TITLE = "Inference"


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def first_rank_phases(a) -> tuple[int, int, pd.DataFrame] | None:
    """(rank, ranks with phases, that rank's rows indexed by phase) for the first rank of
    the ``inference_phases`` table, the rank the report's line speaks of; None without."""
    phases = a.table("inference_phases") if hasattr(a, "table") else None
    if phases is None or phases.empty:
        return None
    rank = int(phases["rank"].iloc[0])
    return rank, int(phases["rank"].nunique()), phases[phases["rank"] == rank].set_index("phase")


def inference_facts(mine: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(label, value, note) of each tile, in the order shown."""
    facts = []
    if "prefill" in mine.index:
        p = mine.loc["prefill"]
        if _finite(p["ttft_ms"]):
            facts.append(("time to first token", U.ms(p["ttft_ms"]), "prefill"))
        else:  # an engine's prefill: no request starts with it
            facts.append(("prefill per forward", U.ms(p["forward_ms"]), ""))
    if "decode" in mine.index:
        d = mine.loc["decode"]
        facts.append(("time per output token", U.ms(d["tpot_ms"]),
                      f"median, {spread_text(d)}"))
        if _finite(d["tokens_per_s"]):
            facts.append(("tokens/s", U.number(round(d["tokens_per_s"])), "decode"))
        if _finite(d["batch"]):
            facts.append(("batch", U.number(int(d["batch"])), ""))
        part, share = top_part(d)
        facts.append(("decode GPU busy", U.pct(d["gpu_busy"]),
                      f"mostly {part_label(part)} {U.pct(share)}"))
        facts.append(("decode HBM use", hbm_text(d), "of the bandwidth"))
    if "mixed" in mine.index:
        facts.append(("mixed per forward", U.ms(mine.loc["mixed", "forward_ms"]),
                      "prefill+decode"))
    if "prefill" in mine.index:
        facts.append(("prefill MFU", hbm_text(mine.loc["prefill"], "mfu"), ""))
    return facts


def _stat(label: str, value: str, note: str) -> html.Div:
    return html.Div([html.Div(value, className="stat-value"),
                     html.Div(label, className="stat-label"),
                     html.Div(note, className="stat-note") if note else None], className="stat")


def inference_tile(a) -> html.Section | None:
    """The Overview's inference card; None for a run without phases."""
    found = first_rank_phases(a)
    if found is None:
        return None
    rank, ranks, mine = found
    source = str(mine["source"].iloc[0])
    per_step = ", ".join(f"{U.number(round(float(n), 1))} {phase}"
                         for phase, n in mine["forwards_per_step"].items())
    where = f"rank {rank} of {ranks}; " if ranks > 1 else ""
    note = (f"{where}forwards per step: {per_step}; phases from {source}. The step's start "
            "to its first token, then one token's GPU work ending to the next's; HBM: the "
            "bytes the ops move over decode's time ('>=': kernels without an op cost move "
            "bytes not counted).")
    stats = html.Div([_stat(*f) for f in inference_facts(mine)], className="inf-stats")
    return C.card(TITLE, stats, html.P(note, className="hint"), id=ids.INF_TILE)
