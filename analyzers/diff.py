"""``profkit diff BASE NEW``: did the change help?

Step time before and after, with a noise estimate from the step-to-step spread; the change
attributed to the breakdown parts, to kernels and to CPU ops (time per step, so runs that
profiled different numbers of steps compare fairly); a verdict improved / regressed /
unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.breakdown import PARTS, analyze_breakdown
from profkit.analyzers.render import clean_json, markdown_table
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import schema as S
from profkit.model import Run

DIFF_SCHEMA = "profkit.diff/1"
TOP = 15


@dataclass
class Diff:
    base: str
    new: str
    verdict: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """Notebook display: verdict, per-part change, kernels and ops (analyzers/html.py)."""
        from profkit.analyzers.html import diff_html

        return diff_html(self)


def step_noise(base_ns: np.ndarray, new_ns: np.ndarray) -> float:
    """Standard error of the difference of the mean step times, relative to the base median
    (0 when either side has a single step: no spread to estimate from)."""
    if len(base_ns) < 2 or len(new_ns) < 2:
        return 0.0
    se = math.sqrt(np.var(base_ns, ddof=1) / len(base_ns) + np.var(new_ns, ddof=1) / len(new_ns))
    return se / float(np.median(base_ns))


def diff_verdict(base_ns: np.ndarray, new_ns: np.ndarray, th: Thresholds) -> dict[str, Any]:
    base_ms, new_ms = float(np.median(base_ns)) / 1e6, float(np.median(new_ns)) / 1e6
    change = new_ms / base_ms - 1.0
    noise = step_noise(base_ns, new_ns)
    bar = max(th.diff_min_change_frac, th.diff_noise_sigmas * noise)
    verdict = "improved" if change <= -bar else "regressed" if change >= bar else "unchanged"
    summary = (f"{verdict}: median step {base_ms:.3f} -> {new_ms:.3f} ms ({change:+.1%}; "
               f"noise +/-{noise:.1%}, changes under {bar:.1%} count as unchanged)")
    return {"verdict": verdict, "summary": summary, "base_step_ms": base_ms, "new_step_ms": new_ms,
            "change_frac": change, "noise_frac": noise, "threshold_frac": bar,
            "base_steps": int(len(base_ns)), "new_steps": int(len(new_ns))}


def _per_step(frame: pd.DataFrame, key: str, n_steps: int) -> pd.Series:
    """Total duration (ns) of each value of ``key`` per rank-step."""
    return frame.groupby(key, observed=True)[S.DUR_NS].sum() / max(n_steps, 1)


def _delta_table(base: pd.Series, new: pd.Series, label: str) -> pd.DataFrame:
    table = pd.DataFrame({"base_ms": base / 1e6, "new_ms": new / 1e6}).fillna(0.0)
    table["delta_ms"] = table["new_ms"] - table["base_ms"]
    table.index.name = label
    order = table["delta_ms"].abs().sort_values(ascending=False).index
    return table.loc[order].head(TOP).reset_index()


def _in_steps(run: Run, kinds: tuple[str, ...]) -> pd.DataFrame:
    frames = [d.events[d.events[S.KIND].isin(kinds) & (d.events[S.STEP] >= 0)]
              for d in run.ranks.values()]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def diff_runs(base: Run, new: Run, thresholds: Thresholds = DEFAULT) -> Diff:
    b_steps = analyze_breakdown(base).tables["step_breakdown"]
    n_steps = analyze_breakdown(new).tables["step_breakdown"]
    if b_steps.empty or n_steps.empty:
        verdict = {"verdict": None, "summary": "a run has no GPU steps: nothing to compare"}
        return Diff(base.path, new.path, verdict)
    verdict = diff_verdict(b_steps["step_ns"].to_numpy(), n_steps["step_ns"].to_numpy(), thresholds)
    parts = _delta_table(b_steps[list(PARTS)].mean(), n_steps[list(PARTS)].mean(), "part")
    tables = {"diff_parts": parts}
    for name, kinds in (("diff_kernels", S.GPU_KINDS), ("diff_ops", (S.KIND_CPU_OP,))):
        b, n = _in_steps(base, kinds), _in_steps(new, kinds)
        if not b.empty or not n.empty:
            tables[name] = _delta_table(_per_step(b, S.NAME, len(b_steps)) if len(b) else pd.Series(),
                                        _per_step(n, S.NAME, len(n_steps)) if len(n) else pd.Series(),
                                        "name")
    return Diff(base.path, new.path, verdict, tables)


def diff_to_json(d: Diff) -> dict[str, Any]:
    return clean_json({"schema": DIFF_SCHEMA, "base": d.base, "new": d.new, "verdict": d.verdict,
                   **{k: t.to_dict("records") for k, t in d.tables.items()}})


def diff_to_text(d: Diff, markdown: bool = False) -> str:
    head = f"profkit diff: {d.base} -> {d.new}"
    lines = [f"## {head}" if markdown else head, "",
             f"{'**Verdict:** ' if markdown else 'VERDICT: '}{d.verdict['summary']}", ""]
    titles = {"diff_parts": "Where the step time changed (ms per step, mean over rank-steps)",
              "diff_kernels": "Kernels that changed most (ms per step and rank)",
              "diff_ops": "CPU ops that changed most (inclusive ms per step and rank)"}
    for name, title in titles.items():
        table = d.tables.get(name)
        if table is None or table.empty:
            continue
        table = table.copy()
        table[table.columns[0]] = table[table.columns[0]].astype(str).str.slice(0, 70)
        lines += [f"### {title}" if markdown else title + ":"]
        lines += (markdown_table(table) if markdown
                  else [table.to_string(index=False, float_format=lambda v: f"{v:.3f}")]) + [""]
    return "\n".join(lines) + "\n"
