"""The pipeline bubble's finding: one for the run (one cause), from the pipeline measurement
(analyzers/measure/pipeline.py): the bubble each stage measured against the schedule's
theory, the stages whose own time per microbatch is well above the others' (and what that
time is), and the advice with the stage model's savings: more microbatches at the same
global batch, balanced stages."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.pipeline import UNBALANCED_X, bubble_theory, stage_names
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B"}
INTERLEAVED_MEASURED = (
    "on a 4-stage GPT at 8 microbatches it ran 6% slower than 1F1B, its bubble no smaller "
    "(samples/runs/parallel/pipeline_m8_1f1b and _interleaved)")


def pipeline_findings(result: Result, th: Thresholds) -> list[Finding]:
    facts = result.facts
    table = result.tables.get("pipeline_stages")
    if facts.get("topic") != "pipeline" or table is None or table.empty:
        return []
    bubble = table["bubble_frac"].to_numpy(float)
    if not np.isfinite(bubble).any() or float(np.nanmax(bubble)) < th.pipeline_bubble_frac:
        return []
    p, m, theory = int(facts["stages"]), int(facts["microbatches"]), float(facts["theory_frac"])
    v = int(facts.get("stages_per_rank", 1) or 1)
    schedule = SCHEDULES.get(facts.get("schedule", ""), "")
    if v > 1:
        schedule += f", {v} stages per rank"
    low, high = float(np.nanmin(bubble)), float(np.nanmax(bubble))
    spread = pct(low) if pct(low) == pct(high) else f"{low:.0%}".rstrip("%") + f"-{pct(high)}"
    unbalanced = table["unbalanced"].to_numpy(bool)
    heavy = stage_names(table, unbalanced)
    message = (f"pipeline bubble: the {p} stages wait {spread} of the step for their "
               f"neighbours ({(schedule + ', ') if schedule else ''}{m} microbatches per step; "
               f"theory (p-1)/({'v*' if v > 1 else ''}m+p-1) = {pct(theory)} for balanced "
               "stages)"
               + _why(table, facts, heavy))
    advice = _advice(table, facts, unbalanced, heavy, p, m, theory)
    evidence = {
        "stages": p, "microbatches": m, "schedule": facts.get("schedule", ""),
        "stages_per_rank": int(facts.get("stages_per_rank", 1) or 1),
        "pipelines": int(facts.get("pipelines", 1)),
        "stage_ranks": [int(r) for r in table["rank"]],
        "bubble_frac_per_stage": [round(float(b), 4) for b in bubble],
        "theory_frac": round(theory, 4),
        "own_ms_per_microbatch": [round(float(c), 3) for c in table["own_ms_per_microbatch"]],
        "step_ms": round(float(facts["period_ms"]), 3),
        "model_step_ms": round(float(facts["model_ms"]), 3),
        "unbalanced_stages": heavy, "unbalanced_above_x": UNBALANCED_X,
        "more_microbatches": int(facts["more_microbatches"]),
        "more_microbatches_saving_frac": round(float(facts["saving_frac"]), 4),
        "balanced_saving_frac": round(float(facts["balanced_saving_frac"]), 4),
        "threshold": th.pipeline_bubble_frac}
    finding = Finding(category="pipeline_bubble", severity=_severity(high, th),
                      message=message, recommendation=" ".join(advice), evidence=evidence)
    best = max(float(facts["saving_frac"]), float(facts["balanced_saving_frac"]))
    if best > 0:
        frac = min(best, high)  # never more than the bubble measured
        finding = finding.with_saving(frac * float(facts["period_ms"]), frac)
    return [finding]


def _why(table: pd.DataFrame, facts: dict, heavy: list[str]) -> str:
    """Where the stages wait, and why the measure departs from the theory."""
    first, last = table.iloc[0], table.iloc[-1]
    text = (f": the first stage waits after its forwards for the gradients to come back "
            f"({pct(first.bubble_frac)}), the last before its first activations arrive "
            f"({pct(last.bubble_frac)})")
    if heavy:
        text += (f"; the slowest stage paces the others: with each stage's own time, "
                 f"(m-1) x slowest + the sum of all per microbatch gives a "
                 f"{facts['model_ms']:.0f} ms step, measured {facts['period_ms']:.0f} ms")
    return text


def _advice(table: pd.DataFrame, facts: dict, unbalanced: np.ndarray, heavy: list[str],
            p: int, m: int, theory: float) -> list[str]:
    advice: list[tuple[float, str]] = []  # (saving, text): the larger saving first
    more, saving = int(facts["more_microbatches"]), float(facts["saving_frac"])
    if heavy:
        worst = table[unbalanced].sort_values("own_ms_per_microbatch").iloc[-1]
        extra = worst.own_ms_per_microbatch / float(facts["median_ms_per_microbatch"]) - 1
        advice.append((float(facts["balanced_saving_frac"]),
            f"Rebalance the stages: {', '.join(heavy)} takes {extra:.0%} more time per "
            "microbatch than the median stage (its compute and whatever idles its GPU: "
            "launches, host work), and the others wait for it every microbatch: move layers "
            "off it (the last stage also runs the loss and the output head) or remove its "
            f"own bottleneck; balanced stages would save ~{pct(facts['balanced_saving_frac'])} "
            "of the step."))
    v = int(facts.get("stages_per_rank", 1) or 1)
    if more > m and saving > 0:
        advice.append((saving,
            f"Split the same global batch into more microbatches: {m} -> {more} cuts the "
            f"bubble's theory from {pct(theory)} to {pct(bubble_theory(p, more * v))} and the "
            f"step by ~{pct(saving)} (each stage's work stays, split over more microbatches; "
            "smaller microbatches run their kernels less efficiently and launch more often, "
            "so expect somewhat less)."))
    ordered = [text for _, text in sorted(advice, key=lambda a: -a[0])]
    if v > 1:
        return ordered + [
            f"The schedule is interleaved already ({v} stages per rank): each microbatch "
            f"crosses the ranks {v} times, so the point-to-point transfers grow with v; "
            f"{INTERLEAVED_MEASURED}: compare it with plain 1F1B at the same microbatches."]
    return ordered + [
        "A 1F1B schedule (torch.distributed.pipelining.Schedule1F1B) has the same bubble but "
        "holds at most p microbatches' activations per stage instead of m: the memory that "
        "lets m grow. An interleaved schedule (ScheduleInterleaved1F1B, v stages per rank) "
        "cuts the bubble's theory to (p-1)/(v*m+p-1) but sends v times the activations; "
        f"{INTERLEAVED_MEASURED}: measure it before adopting it."]


def _severity(frac: float, th: Thresholds) -> str:
    return "critical" if frac >= max(0.4, 3 * th.pipeline_bubble_frac) else "warning"


def verdict_note(result: Result | None) -> str:
    """'; a pipeline of 4 stages x 4 microbatches (GPipe): its stages wait 40-48% of its
    259.51 ms step in the bubble (theory 43%)' for the verdict, when the run is a pipeline
    (its step: the first stage's GPU span, measure/pipeline.py)."""
    if result is None or result.facts.get("topic") != "pipeline":
        return ""
    f, table = result.facts, result.tables["pipeline_stages"]
    bubble = table["bubble_frac"].to_numpy(float)
    schedule = SCHEDULES.get(f.get("schedule", ""), "")
    low, high = float(np.nanmin(bubble)), float(np.nanmax(bubble))
    spread = pct(low) if pct(low) == pct(high) else f"{low:.0%}".rstrip("%") + f"-{pct(high)}"
    if int(f.get("stages_per_rank", 1) or 1) > 1:
        schedule += f", {f['stages_per_rank']} stages per rank"
    return (f"; a pipeline of {f['stages']} stages x {f['microbatches']} microbatches"
            f"{f' ({schedule})' if schedule else ''}: its stages wait {spread} of its "
            f"{f['period_ms']:.2f} ms step in the bubble (theory {pct(f['theory_frac'])})")
