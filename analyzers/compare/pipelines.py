"""What changed in a pipeline between two runs (analyzers/measure/pipeline.py): its schedule,
stages and microbatches, and the bubble against the theory; and in an FSDP run's wrapping
(analyzers/measure/fsdp_units.py): its units. A schedule, microbatch or wrapping change is
the same work (the model and the global batch stay); it is named, not judged here."""

from __future__ import annotations

import pandas as pd

SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "": "unknown"}


def _bubble(t: pd.DataFrame) -> str:
    lo, hi = float(t["bubble_frac"].min()), float(t["bubble_frac"].max())
    return f"{lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"{lo:.0%}".rstrip("%") + f"-{hi:.0%}"


def pipeline_changes(base, new) -> list[str]:
    """Lines for the diff's changes: a pipeline that appeared or went away, another
    schedule or stage count, and the stages' bubble before and after."""
    b, n = base.table("pipeline_stages"), new.table("pipeline_stages")
    if b.empty and n.empty:
        return []
    if b.empty or n.empty:
        which, t = ("new", n) if b.empty else ("base", b)
        return [f"only {which} is a pipeline ({t['stage'].nunique()} stages, "
                f"{int(t['microbatches'].iloc[0])} microbatches)"]
    out = []
    schedules = [_schedule(a) for a in (base, new)]
    if schedules[0] != schedules[1]:
        out.append(f"pipeline schedule {SCHEDULES.get(schedules[0], schedules[0])} -> "
                   f"{SCHEDULES.get(schedules[1], schedules[1])}")
    stages = [t["stage"].nunique() for t in (b, n)]
    if stages[0] != stages[1]:
        out.append(f"pipeline stages {stages[0]} -> {stages[1]}")
    theory = [float(t["theory_frac"].iloc[0]) for t in (b, n)]
    out.append(f"pipeline bubble {_bubble(b)} -> {_bubble(n)} of the step (theory "
               f"{theory[0]:.0%} -> {theory[1]:.0%})")
    return out


def _schedule(analysis) -> str:
    found = [f for f in analysis.findings if f.category == "pipeline_bubble"]
    return str(found[0].evidence.get("schedule", "")) if found else ""


def fsdp_changes(base, new) -> list[str]:
    """'FSDP units 33 -> 9 per rank' when the wrapping changed (the largest count of any
    rank on each side); nothing when either side has no FSDP units or the count stayed."""
    counts = [a.table("fsdp_ranks") for a in (base, new)]
    if any(t.empty or "units" not in t for t in counts):
        return []
    b, n = (int(t["units"].max()) for t in counts)
    return [] if b == n else [f"FSDP units {b} -> {n} per rank"]
