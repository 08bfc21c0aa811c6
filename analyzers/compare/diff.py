"""``profkit diff BASE NEW``: did the change help?

Built on two analyses (``analyze_run``, so ``--ranks``, ``--steps`` and the result cache work
as for ``profkit analyze``) and on their *used* steps: the steady steps each verdict reads,
without the first/last recorded and one-off steps. One sample per step (the median over the
ranks that used it: synchronised ranks are one measurement, not several); the change is the
Hodges-Lehmann shift with its Mann-Whitney interval (:mod:`.stats`), called only when the
interval excludes zero. With too few steps for the interval the noise is not made up: the
report says it cannot be estimated and calls only changes beyond the steady-step spread.
Another workload gets no verdict, another GPU or world size a warning (:mod:`.comparable`).
The change is attributed per step (and rank) to breakdown parts, kernels and CPU ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.analyze import Analysis, analyze, part_name
from profkit.analyzers.compare import stats
from profkit.analyzers.compare.comparable import comparability, per_name, used_rank_steps
from profkit.analyzers.measure.breakdown import PARTS
from profkit.analyzers.measure.steps import USED, run_step_times_ns
from profkit.analyzers.options import DEFAULT_OPTIONS, AnalysisOptions
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.model import Run

TOP = 15
NOT_COMPARABLE = "not comparable"


@dataclass
class Diff:
    base: str
    new: str
    verdict: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """Notebook display: verdict, per-part change, kernels and ops (analyzers/report/html.py)."""
        from profkit.analyzers.report.html import diff_html

        return diff_html(self)


def step_samples(analysis: Analysis) -> np.ndarray:
    """Step times (ns) of the used steps, one per step: the median over its ranks."""
    return run_step_times_ns(analysis.table("step_breakdown"))


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
                          "noise_frac": (hi - lo) / 2, "threshold_frac": floor}


def _untested(change: float, base: np.ndarray, new: np.ndarray, th: Thresholds) -> tuple[str, str, dict]:
    """Too few steps for an interval: a change is called only when the step is at least
    1 + bar times slower or faster (the band the step selection accepts as steady, and as
    it, the same either way) and the two runs' steps do not overlap."""
    bar = th.diff_untested_min_change_frac
    ratio = 1.0 + change
    below, above = new.max() < base.min(), new.min() > base.max()
    verdict = ("improved" if ratio <= 1 / (1 + bar) and below else
               "regressed" if ratio >= 1 + bar and above else "unchanged")
    how = (f"cannot estimate the noise from {len(base)} and {len(new)} steady step(s), an "
           f"interval needs {stats.min_steps(th.diff_confidence)} per side: steps less than "
           f"{1 + bar:.2f}x slower or faster count as unchanged")
    if verdict == "unchanged" and not 1 / (1 + bar) < ratio < 1 + bar:
        how += ", and so do runs whose steps overlap"
    return verdict, how, {"tested": False, "interval_frac": None, "coverage": None,
                          "noise_frac": None, "threshold_frac": bar}


def step_verdict(base_ns: np.ndarray, new_ns: np.ndarray, th: Thresholds = DEFAULT) -> dict[str, Any]:
    """Improved / regressed / unchanged from one step time per used step on each side."""
    base_ns, new_ns = np.asarray(base_ns, float), np.asarray(new_ns, float)
    base_med, new_med = float(np.median(base_ns)), float(np.median(new_ns))
    change = new_med / base_med - 1.0
    shift = stats.shift_interval(base_ns, new_ns, th.diff_confidence)
    verdict, how, detail = (_tested(change, shift, base_med, th) if shift is not None
                            else _untested(change, base_ns, new_ns, th))
    headline = (f"{verdict}: median step {base_med / 1e6:.3f} -> {new_med / 1e6:.3f} ms "
                f"({change:+.1%}; {how})")
    return {"verdict": verdict, "summary": headline, "headline": headline,
            "base_step_ms": base_med / 1e6, "new_step_ms": new_med / 1e6, "change_frac": change,
            "confidence": th.diff_confidence, **detail,
            "base_steps": int(len(base_ns)), "new_steps": int(len(new_ns))}


def _judged(verdict: dict[str, Any], base: Analysis, new: Analysis, th: Thresholds) -> dict:
    """The step verdict with what stops or qualifies it: another workload (no verdict),
    another GPU or world size (warnings), and what changed besides the step time."""
    comp = comparability(base, new, th)
    if comp.reasons:
        verdict["verdict"] = NOT_COMPARABLE
        verdict["headline"] = (f"{NOT_COMPARABLE}: {'; '.join(comp.reasons)} (median step "
                               f"{verdict['base_step_ms']:.3f} -> {verdict['new_step_ms']:.3f} "
                               f"ms, {verdict['change_frac']:+.1%}, not judged)")
    verdict["summary"] = verdict["headline"] + "".join(f"; WARNING: {w}" for w in comp.warnings)
    verdict.update(reasons=comp.reasons, warnings=comp.warnings,
                   changes=straggler_changes(base, new) + bottleneck_change(base, new),
                   evidence=comp.evidence)
    return verdict


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


def _delta_table(base: pd.Series, new: pd.Series, label: str) -> pd.DataFrame:
    table = pd.DataFrame({"base_ms": base / 1e6, "new_ms": new / 1e6}).fillna(0.0)
    table["delta_ms"] = table["new_ms"] - table["base_ms"]
    table.index.name = label
    order = table["delta_ms"].abs().sort_values(ascending=False, kind="stable").index
    return table.loc[order].head(TOP).reset_index()


def _used_parts(analysis: Analysis) -> pd.Series:
    steps = analysis.table("step_breakdown")
    return steps.loc[steps[USED].astype(bool), list(PARTS)].mean()


def _per_step(analysis: Analysis, table: str, column: str) -> pd.Series:
    return per_name(analysis, table, column) / max(used_rank_steps(analysis), 1)


def attribution(base: Analysis, new: Analysis) -> dict[str, pd.DataFrame]:
    """Where the time per used rank-step changed: ``diff_parts`` (breakdown parts),
    ``diff_kernels`` (GPU ops) and ``diff_ops`` (CPU ops, self time); ms, largest first."""
    tables = {"diff_parts": _delta_table(_used_parts(base), _used_parts(new), "part")}
    for name, source, column in (("diff_kernels", "used_step_kernels", "total_ns"),
                                 ("diff_ops", "used_step_ops", "self_ns")):
        b, n = _per_step(base, source, column), _per_step(new, source, column)
        if len(b) or len(n):
            tables[name] = _delta_table(b, n, "name")
    return tables


def diff_analyses(base: Analysis, new: Analysis, thresholds: Thresholds = DEFAULT) -> Diff:
    """Compare two analyses (module doc)."""
    paths = str(base.run.get("path")), str(new.run.get("path"))
    samples = step_samples(base), step_samples(new)
    empty = [p for p, s in zip(paths, samples) if not len(s)]
    if empty:
        summary = f"no steady GPU steps in {' and '.join(empty)}: nothing to compare"
        return Diff(*paths, {"verdict": None, "summary": summary, "headline": summary,
                             "reasons": [], "warnings": [], "changes": []})
    verdict = _judged(step_verdict(*samples, thresholds), base, new, thresholds)
    return Diff(*paths, verdict, attribution(base, new))


def diff_runs(base: Run, new: Run, thresholds: Thresholds = DEFAULT,
              options: AnalysisOptions = DEFAULT_OPTIONS) -> Diff:
    """:func:`diff_analyses` of two loaded runs, each analysed here."""
    return diff_analyses(analyze(base, thresholds, options), analyze(new, thresholds, options),
                         thresholds)
