"""The report's inference outputs (analyzers/measure/inference.py): one line under the
verdict (prefill, time to first token, time per output token, tokens per second) and a
table of the phases per rank."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.measure.inference import ESTIMATE
from profkit.analyzers.parts import PARTS, part_label
from profkit.analyzers.report.section import MAX_RANK_ROWS, Section

MIN_BYTES_COVERAGE = 0.5  # below it the HBM figure is a lower bound and is marked so


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def top_part(row: pd.Series) -> tuple[str, float]:
    """The part holding most of a phase's time, and its share."""
    times = {p: float(row.get(f"{p}_ms", 0.0) or 0.0) for p in PARTS}
    part = max(times, key=times.get)
    return part, times[part] / float(row["time_ms"]) if row["time_ms"] else 0.0


def hbm_text(row: pd.Series, key: str = "hbm_util") -> str:
    """HBM bandwidth use (or MFU: ``key="mfu"``): '~x%' where the bytes are estimated from
    the eager forwards (graph replays), '>= x%' where kernels without an op cost take half
    the phase's kernel time or more; '-' without it."""
    if not _finite(row.get(key)):
        return U.MISSING
    if key == "hbm_util" and row.get("bytes_source") == ESTIMATE:
        return "~" + U.pct(row[key])
    lower = ">= " if row["bytes_coverage"] < MIN_BYTES_COVERAGE else ""
    return lower + U.pct(row[key])


def spread_text(row: pd.Series) -> str:
    """``p10-p90 24.8-32.5 ms``: the spread of the time per output token."""
    return f"p10-p90 {row['tpot_p10_ms']:.3g}-{row['tpot_p90_ms']:.3g} ms"


def inference_line(a: Analysis) -> str | None:
    """``prefill 6.6 ms (time to first token), then 15 tokens at 3.46 ms each (p10-p90
    3.40-3.52 ms), batch 8: 2,312 tokens/s; decode GPU busy 12%, mostly launch overhead``
    for the first rank with phases; None for a run without."""
    phases = a.table("inference_phases")
    if phases.empty:
        return None
    rank = int(phases["rank"].iloc[0])
    mine = phases[phases["rank"] == rank].set_index("phase")
    said = []
    if "prefill" in mine.index:
        p = mine.loc["prefill"]
        said.append(f"prefill {U.ms(p['ttft_ms'])} (time to first token)" if _finite(p["ttft_ms"])
                    else f"prefill {U.ms(p['forward_ms'])} per forward")
    if "decode" in mine.index:
        d = mine.loc["decode"]
        tokens = d["forwards_per_step"]
        text = (f"{U.number(round(tokens, 1))} decode step(s) at {U.ms(d['tpot_ms'])} each "
                f"({spread_text(d)})")
        if _finite(d["batch"]):
            text += f", batch {int(d['batch'])}: {U.number(round(d['tokens_per_s']))} tokens/s"
        part, share = top_part(d)
        text += f"; decode GPU busy {U.pct(d['gpu_busy'])}"
        if part != "compute":
            text += f", {U.pct(share)} {part_label(part)}"
        if _finite(d["hbm_util"]):
            text += f", HBM {hbm_text(d)} of its bandwidth"
        said.append(text)
    if "mixed" in mine.index:
        said.append(f"mixed prefill+decode {U.ms(mine.loc['mixed', 'forward_ms'])} per forward")
    ranks = phases["rank"].nunique()
    where = f" (rank {rank} of {ranks})" if ranks > 1 else ""
    source = str(phases["source"].iloc[0])
    return "; ".join(said) + where + f" [phases from {source}]"


def inference_section(a: Analysis) -> Section | None:
    """The phases per rank: forwards, batch, time, share, TTFT, TPOT, tokens/s, GPU busy,
    the part holding most of the time, MFU and HBM use."""
    phases = a.table("inference_phases")
    if phases.empty:
        return None
    rows = phases.head(3 * MAX_RANK_ROWS)
    tops = [top_part(r) for _, r in rows.iterrows()]
    table = pd.DataFrame({
        "rank": rows["rank"].astype(int), "phase": rows["phase"],
        "forwards/step": [U.number(round(v, 1)) for v in rows["forwards_per_step"]],
        "batch": [U.number(v) if _finite(v) else U.MISSING for v in rows["batch"]],
        "time": [U.ms(v, "step") for v in rows["time_ms"]],
        "of step": [U.pct(v) for v in rows["share"]],
        "TTFT": [U.ms(v) if _finite(v) else U.MISSING for v in rows["ttft_ms"]],
        "per token": [U.ms(v) if _finite(v) else U.MISSING for v in rows["tpot_ms"]],
        "tokens/s": [U.number(round(v)) if _finite(v) else U.MISSING
                     for v in rows["tokens_per_s"]],
        "GPU busy": [U.pct(v) for v in rows["gpu_busy"]],
        "mostly": [f"{part_label(p)} {U.pct(s)}" for p, s in tops],
        "MFU": [hbm_text(r, "mfu") for _, r in rows.iterrows()],
        "HBM": [hbm_text(r) for _, r in rows.iterrows()]})
    notes = ["prefill: the step's start to its first token; per token: from one token's GPU "
             "work ending to the next's (median); HBM: the bytes the ops move (their shapes) "
             "over the phase's time against the device's bandwidth ('>=': kernels without an "
             "op cost, such as Triton's, move bytes not counted; '~': graph replays, estimated "
             "from the eager forwards' weights and the prefill's attention bytes)"]
    return Section("Inference phases (prefill: the forward over the prompt; decode: one "
                   "forward per new token)", table, notes)


def inference_rows(a: Analysis) -> list[dict[str, Any]]:
    return a.table("inference_phases").to_dict("records")
