"""``profkit diff BASE NEW``: did the change help?

Built on two analyses (``analyze_run``, so ``--ranks``, ``--steps`` and the result cache work
as for ``profkit analyze``) and on their *used* steps: the steady steps each verdict reads,
without the first/last recorded and one-off steps. One sample per step (the median over the
ranks that used it: synchronised ranks are one measurement, not several); the change is the
Hodges-Lehmann shift with its Mann-Whitney interval (:mod:`.stats`), called only when the
interval excludes zero. With too few steps for the interval the noise is not made up: the
report says it cannot be estimated and calls only changes beyond the steady-step spread.

Whether the two runs are the same work is decided from what an optimization leaves alone
(:mod:`.comparable`): another model gets no verdict, another batch is judged per sample or
per token (or per item, as the user says with ``items_per_step``), another GPU or world size
gets a warning. What kind of change it was is named (:mod:`.nature`), and the change is
attributed per step (and per item) to breakdown parts, kernel groups, kernels and CPU ops
(:mod:`.attribution`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.analyze import Analysis, analyze
from profkit.analyzers.compare import memory, phases, stats
from profkit.analyzers.compare.attribution import attribution
from profkit.analyzers.compare.comparable import Comparability, comparability
from profkit.analyzers.compare.nature import nature
from profkit.analyzers.compare.pipelines import fsdp_changes, pipeline_changes
from profkit.analyzers.measure.steps import run_step_times_ns
from profkit.analyzers.options import DEFAULT_OPTIONS, AnalysisOptions
from profkit.analyzers.parts import part_name
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.model import Run
from profkit.strings import with_python_strings

NOT_COMPARABLE = "not comparable"
STEP = "step"


@dataclass
class Diff:
    base: str
    new: str
    verdict: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def __repr__(self) -> str:
        """One line: the two runs and the verdict (the tables are an attribute)."""
        return f"<Diff {self.base} -> {self.new}: {self.verdict.get('summary', '')}>"

    def _repr_html_(self) -> str:
        """Notebook display: verdict, per-part change, kernels and ops (analyzers/report/html.py)."""
        from profkit.analyzers.report.html import diff_html

        return diff_html(self)


def step_samples(analysis: Analysis) -> np.ndarray:
    """Step times (ns) of the used steps, one per step: the median over its ranks; a
    pipeline's: its first stage's GPU span of the step (``pipeline_steps``), as its stages'
    step windows are offset from each other (the last stage ends its step first)."""
    pipeline = analysis.table("pipeline_steps")
    if len(pipeline):
        return pipeline["step_ns"].to_numpy(float)
    return run_step_times_ns(analysis.table("step_breakdown"))


def time_text(ns: float) -> str:
    """``43.646 ms``; under 0.1 ms in microseconds (a token's share of a step)."""
    return f"{ns / 1e6:.3f} ms" if ns >= 1e5 else f"{ns / 1e3:.3f} us"


def _tested(change: float, shift: stats.Shift, base_ns: float, th: Thresholds) -> tuple[str, str, dict]:
    lo, hi = shift.low / base_ns, shift.high / base_ns
    floor = th.diff_min_change_frac
    verdict = ("improved" if hi < 0 and change <= -floor else
               "regressed" if lo > 0 and change >= floor else "unchanged")
    how = (f"{th.diff_confidence:.0%} interval {lo:+.1%} to {hi:+.1%} from "
           f"{shift.n_base} and {shift.n_new} steady steps")
    if verdict == "unchanged" and lo <= 0 <= hi:
        how += ": no change beyond the noise"
    elif verdict == "unchanged":
        how += f": under the {floor:.0%} that counts"
    return verdict, how, {"tested": True, "interval_frac": [lo, hi], "coverage": shift.confidence,
                          "noise_frac": (hi - lo) / 2, "threshold_frac": floor,
                          "change_low_frac": lo, "spread_frac": None}


def _untested(change: float, base: np.ndarray, new: np.ndarray, th: Thresholds) -> tuple[str, str, dict]:
    """Too few steps for an interval: a change is called only when the two runs' steps do
    not overlap and the step is at least 1 + bar times slower or faster: bar is the band
    the step selection accepts as steady (the same either way), or, where a side has two or
    more steps, ``diff_spread_x`` times the steps' own spread when that is less (not below
    ``diff_min_change_frac``): a steady change beyond the spread, said as likely."""
    bar = th.diff_untested_min_change_frac
    spread = steady_spread(base, new)
    if spread is not None:
        bar = min(bar, max(th.diff_min_change_frac, th.diff_spread_x * spread))
    ratio = 1.0 + change
    below, above = new.max() < base.min(), new.min() > base.max()
    verdict = ("improved" if ratio <= 1 / (1 + bar) and below else
               "regressed" if ratio >= 1 + bar and above else "unchanged")
    how = (f"cannot estimate the noise from {len(base)} and {len(new)} steady step(s), an "
           f"interval needs {stats.min_steps(th.diff_confidence)} per side: ")
    if spread is not None and bar < th.diff_untested_min_change_frac:
        sides = [f"the {side}'s {len(x)} steps" for side, x in (("base", base), ("new", new))
                 if len(x) >= 2]
        who = "each side's steps" if len(sides) == 2 else sides[0]
        how += (f"{who} agree within {spread:.1%}, so steps less than "
                f"{1 + bar:.2f}x slower or faster count as unchanged")
        if verdict != "unchanged":
            single = min(len(base), len(new)) < 2
            how += (f"; {abs(change):.1%} is {abs(change) / max(spread, 1e-9):.0f}x that "
                    f"spread: {'tentative (one side has a single step)' if single else 'likely'}"
                    ", not tested")
    else:
        how += f"steps less than {1 + bar:.2f}x slower or faster count as unchanged"
    if verdict == "unchanged" and not 1 / (1 + bar) < ratio < 1 + bar:
        how += ", and so do runs whose steps overlap"
    # the least slowdown every pair of steps shows (the CI gate reads it for a regression)
    low = float(new.min() - base.max()) / float(np.median(base))
    return verdict, how, {"tested": False, "interval_frac": None, "coverage": None,
                          "noise_frac": None, "threshold_frac": bar, "change_low_frac": low,
                          "spread_frac": spread}


def steady_spread(base: np.ndarray, new: np.ndarray) -> float | None:
    """The larger of each side's (max - min) / median over its steps, of the sides with two
    or more steps (None when neither has)."""
    spreads = [float((s.max() - s.min()) / np.median(s)) for s in (base, new) if len(s) >= 2]
    return max(spreads) if spreads else None


def step_verdict(base_ns: np.ndarray, new_ns: np.ndarray, th: Thresholds = DEFAULT,
                 unit: str = STEP) -> dict[str, Any]:
    """Improved / regressed / unchanged from one time per used step on each side: the
    step's time, or (``unit`` sample, token, item) the step's time per item."""
    base_ns, new_ns = np.asarray(base_ns, float), np.asarray(new_ns, float)
    base_med, new_med = float(np.median(base_ns)), float(np.median(new_ns))
    change = new_med / base_med - 1.0
    shift = stats.shift_interval(base_ns, new_ns, th.diff_confidence)
    verdict, how, detail = (_tested(change, shift, base_med, th) if shift is not None
                            else _untested(change, base_ns, new_ns, th))
    what = (f"median step {base_med / 1e6:.3f} -> {new_med / 1e6:.3f} ms" if unit == STEP else
            f"{time_text(base_med)} -> {time_text(new_med)} per {unit}")
    headline = f"{verdict}: {what} ({change:+.1%}; {how})"
    return {"verdict": verdict, "summary": headline, "headline": headline,
            "base_step_ms": base_med / 1e6, "new_step_ms": new_med / 1e6, "change_frac": change,
            "confidence": th.diff_confidence, **detail,
            "base_steps": int(len(base_ns)), "new_steps": int(len(new_ns))}


def basis(comp: Comparability, items_per_step: tuple[float, float] | None) -> dict | None:
    """What one step's time is divided by: the items the user gave, else the samples or
    tokens per step when the batch changed (None: compare steps)."""
    if items_per_step is not None:
        a, b = (float(x) for x in items_per_step)
        return {"unit": "item", "items": [a, b], "source": "given",
                "text": f"{a:g} -> {b:g} items per step (--items-per-step)"}
    batch = comp.batch
    if batch is None or None in batch["items"] or batch["items"][0] == batch["items"][1]:
        return None
    return {**batch, "source": "trace"}


def _judge(base: Analysis, new: Analysis, samples: tuple[np.ndarray, np.ndarray],
           th: Thresholds, items_per_step) -> tuple[dict, dict | None]:
    """The verdict on steps or items, with what stops or qualifies it (module doc)."""
    comp = comparability(base, new, th)
    per = basis(comp, items_per_step)
    if per is None:
        verdict = step_verdict(*samples, th)
    else:
        scaled = [s / n for s, n in zip(samples, per["items"])]
        verdict = step_verdict(*scaled, th, unit=per["unit"])
        steps = [float(np.median(s)) / 1e6 for s in samples]
        verdict.update(base_ms_per_item=verdict["base_step_ms"], new_ms_per_item=verdict["new_step_ms"],
                       base_step_ms=steps[0], new_step_ms=steps[1],
                       step_change_frac=steps[1] / steps[0] - 1.0)
        verdict["headline"] = (f"{verdict['headline']}, judged per {per['unit']}: {per['text']}; "
                               f"median step {steps[0]:.3f} -> {steps[1]:.3f} ms")
    micro = comp.evidence.get("microbatches")
    if micro is not None:  # one global batch in more microbatches: judged per step, said
        verdict["headline"] += f", judged per step: {micro['text']}"
    verdict.update(basis=per["unit"] if per else STEP, items_per_step=per["items"] if per else None)
    if comp.reasons:
        verdict["verdict"] = NOT_COMPARABLE
        verdict["headline"] = (f"{NOT_COMPARABLE}: {'; '.join(comp.reasons)} (median step "
                               f"{verdict['base_step_ms']:.3f} -> {verdict['new_step_ms']:.3f} "
                               f"ms, {verdict['new_step_ms'] / verdict['base_step_ms'] - 1:+.1%}, "
                               "not judged)")
    kinds = [] if comp.reasons else nature(base, new)  # another workload: no "change" to name
    verdict["summary"] = verdict["headline"] + "".join(f"; WARNING: {w}" for w in comp.warnings)
    verdict.update(reasons=comp.reasons, warnings=comp.warnings, nature=kinds, notes=comp.notes,
                   changes=kinds + comp.notes + pipeline_changes(base, new) + fsdp_changes(base, new)
                   + straggler_changes(base, new)
                   + bottleneck_change(base, new), evidence=comp.evidence)
    return verdict, per


def straggler_changes(base: Analysis, new: Analysis) -> list[str]:
    """Stragglers that appeared, went away or stayed, with what they cost the others."""
    def cost(s: dict) -> float:
        return s["evidence"]["others_wait_ms_per_step"]

    b = {s["rank"]: s for s in base.stragglers}
    n = {s["rank"]: s for s in new.stragglers}
    out = [f"rank {r} became a straggler: the others lose {cost(n[r]):.2f} ms per step "
           "waiting for it" for r in sorted(n.keys() - b.keys())]
    out += [f"rank {r} is no longer a straggler (the others lost {cost(b[r]):.2f} ms per "
            "step waiting for it)" for r in sorted(b.keys() - n.keys())]
    out += [f"rank {r} is still a straggler: the others' wait for it {cost(b[r]):.2f} -> "
            f"{cost(n[r]):.2f} ms per step" for r in sorted(b.keys() & n.keys())]
    return out


def bottleneck_change(base: Analysis, new: Analysis) -> list[str]:
    was, now = base.verdict.get("primary"), new.verdict.get("primary")
    if was is None or now is None or was == now:
        return []
    return [f"the bottleneck moved: {part_name(was)} bound -> {part_name(now)} bound"]


def diff_analyses(base: Analysis, new: Analysis, thresholds: Thresholds = DEFAULT,
                  items_per_step: tuple[float, float] | None = None) -> Diff:
    """Compare two analyses (module doc). ``items_per_step``: samples (or tokens, or any
    unit of work) one step of base and of new processed, when the trace cannot show it."""
    paths = str(base.run.get("path")), str(new.run.get("path"))
    samples = step_samples(base), step_samples(new)
    empty = [p for p, s in zip(paths, samples) if not len(s)]
    if empty:
        summary = f"no steady GPU steps in {' and '.join(empty)}: nothing to compare"
        return Diff(*paths, {"verdict": None, "summary": summary, "headline": summary,
                             "reasons": [], "warnings": [], "changes": [], "nature": [],
                             "notes": []})
    verdict, per = _judge(base, new, samples, thresholds, items_per_step)
    diff = Diff(*paths, verdict, attribution(base, new, per))
    memory.attach(diff, base, new)  # the change of peak memory, where both sides have it
    phases.attach(diff, base, new)  # inference: the change by phase
    return diff


def slower_than(d: Diff, pct: float) -> bool:
    """The CI gate: True only when the change is surely above ``pct`` percent slower: the
    lower end of its interval above it (with too few steps for an interval, a regression
    the diff called whose every step is that much slower). A pair that is not comparable,
    or has nothing to compare, never trips it."""
    v = d.verdict
    low = v.get("change_low_frac")
    if v.get("verdict") in (None, NOT_COMPARABLE) or low is None:
        return False
    if not v.get("tested") and v["verdict"] != "regressed":
        return False
    return low > pct / 100.0


def gate(d: Diff, pct: float) -> tuple[bool, str]:
    """The CI gate's decision (:func:`slower_than`) and its reason in words: what tripped
    it, or why it passed: nothing compared, another workload, an interval whose lower end
    is not above ``pct``, or too few steps for an interval (then the reason, not a bound)."""
    v = d.verdict
    if slower_than(d, pct):
        return True, f"slower beyond the noise ({_gate_evidence(v)}): {v['verdict']}"
    if v.get("verdict") is None:
        return False, f"passed (nothing compared: {v['summary']})"
    if v["verdict"] == NOT_COMPARABLE:
        return False, f"passed (not comparable, not judged: {'; '.join(v['reasons'])})"
    per = v.get("basis") or STEP
    change = f"{v['change_frac']:+.1%} per {per}"
    if v.get("tested"):
        return False, (f"passed ({v['verdict']}, {change}; {_gate_evidence(v)}, not above "
                       f"{pct:g}%)")
    steps = (f"{v['base_steps']} and {v['new_steps']} steady steps, too few for an interval "
             f"({stats.min_steps(v['confidence'])} per side)")
    if v["verdict"] == "regressed":
        return False, (f"passed (regressed, {change}, not tested: {steps}; "
                       f"{_gate_evidence(v)}, not above {pct:g}%)")
    if v["verdict"] == "unchanged":
        return False, (f"passed (could not judge: {steps}; {change} is within the "
                       f"{1 + v['threshold_frac']:.2f}x taken as noise without one)")
    return False, f"passed ({v['verdict']}, {change}, not tested: {steps})"


def _gate_evidence(v: dict[str, Any]) -> str:
    """The bound the gate read: the interval, or the least slowdown of every step pair."""
    per = v.get("basis") or STEP
    if v.get("tested"):
        lo, hi = v["interval_frac"]
        return f"{v['confidence']:.0%} interval {lo:+.1%} to {hi:+.1%} per {per}"
    return (f"every new {per} at least {v['change_low_frac']:+.1%} slower than every base one"
            if v["change_low_frac"] > 0 else
            f"the new and base {per}s overlap ({v['change_low_frac']:+.1%} apart at best)")


@with_python_strings
def diff_runs(base: Run, new: Run, thresholds: Thresholds = DEFAULT,
              options: AnalysisOptions = DEFAULT_OPTIONS,
              items_per_step: tuple[float, float] | None = None) -> Diff:
    """:func:`diff_analyses` of two loaded runs, each analysed here."""
    return diff_analyses(analyze(base, thresholds, options), analyze(new, thresholds, options),
                         thresholds, items_per_step)
