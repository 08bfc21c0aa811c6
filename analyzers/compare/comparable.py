"""Can two runs be compared step for step? What differs between them besides the change?

Two kinds of difference, from the two analyses alone:

- **Another workload** (``reasons``: no improved/regressed verdict): one side trains
  (backward ops, optimizer steps) and the other does not, or the two ran barely the same
  work: the share of kernel time in kernels both ran *and* the overlap of their CPU op calls
  per step both below ``diff_min_mix_overlap_frac``. A step of one is not a step of the
  other, so the ratio of their times says nothing about a change. Both measures must be low:
  other GPUs run other kernels for the same model (one measure low), and removing
  per-step syncs removes CPU ops (the other).
- **Another setting** (``warnings``: the verdict stands, flagged): other GPU models, another
  world size, or one of the two mix measures low. Comparing one workload on other hardware
  or at another scale is a question users ask on purpose, and its answer is the step time.
- **Part of a run** (``warnings``): a side missing ranks of its world, or whose run did not
  end well (:mod:`profkit.analyzers.measure.coverage`, what the report header says too):
  its step times are those of the ranks analysed, and a straggler among the missing is not
  seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.measure.coverage import ended_badly, missing_ranks
from profkit.analyzers.measure.steps import USED
from profkit.analyzers.measure.tables import name_mask
from profkit.analyzers.thresholds import Thresholds

from profkit import schema as S
from profkit.run.rankfiles import rank_ranges

BACKWARD_RE = re.compile(r"Backward\d*$|^autograd::engine::evaluate_function|^Optimizer\.step")


@dataclass
class Comparability:
    reasons: list[str] = field(default_factory=list)  # not the same workload: no verdict
    warnings: list[str] = field(default_factory=list)  # another setting: verdict flagged
    evidence: dict[str, Any] = field(default_factory=dict)


def used_rank_steps(analysis) -> int:
    """Rank-steps behind the verdict (the per-step divisor of totals over used steps)."""
    steps = analysis.table("step_breakdown")
    return int(steps[USED].astype(bool).sum()) if len(steps) else 0


def devices(analysis) -> list[str]:
    """The GPU models the analysed ranks ran on (empty when the traces do not say)."""
    eff = analysis.table("efficiency")
    if eff.empty or "device_name" not in eff:
        return []
    return sorted({str(n) for n in eff["device_name"].dropna() if str(n).strip()})


def trains(analysis) -> bool | None:
    """Whether the used steps ran backward ops or optimizer steps (None: no CPU ops)."""
    ops = analysis.table("used_step_ops")
    if ops.empty:
        return None
    names = ops[S.NAME].astype("category")
    return bool(name_mask(names, BACKWARD_RE).any())


def kernel_overlap(base, new) -> float | None:
    """Share of GPU time in kernels both ran: the sum over names of the smaller of the two
    time shares (1: the same mix of kernels; scale-free, so a faster run still scores 1)."""
    shares = [per_name(a, "used_step_kernels", "total_ns") for a in (base, new)]
    if any(s.sum() <= 0 for s in shares):
        return None
    a, b = (s / s.sum() for s in shares)
    a, b = a.align(b, fill_value=0.0)
    return float(np.minimum(a, b).sum())


def op_overlap(base, new) -> float | None:
    """Weighted Jaccard of CPU op calls per rank-step: sum of the smaller over sum of the
    larger count of each op (1: the same program; a sync loop removed lowers it)."""
    counts = []
    for a in (base, new):
        steps = used_rank_steps(a)
        c = per_name(a, "used_step_ops", "count")
        if not steps or c.sum() <= 0:
            return None
        counts.append(c / steps)
    a, b = counts[0].align(counts[1], fill_value=0.0)
    return float(np.minimum(a, b).sum() / np.maximum(a, b).sum())


def per_name(analysis, table: str, column: str) -> pd.Series:
    t = analysis.table(table)
    if t.empty:
        return pd.Series(dtype=float)
    return t.groupby(t[S.NAME].astype(str))[column].sum().astype(float)


def _workload(base, new, th: Thresholds, out: Comparability) -> None:
    train = (trains(base), trains(new))
    if None not in train and train[0] != train[1]:
        kinds = ["training (backward ops, optimizer steps)" if t else "inference (no backward)"
                 for t in train]
        out.reasons.append(f"{kinds[0]} vs {kinds[1]}")
    kernels, ops = kernel_overlap(base, new), op_overlap(base, new)
    out.evidence.update(kernel_overlap=kernels, op_overlap=ops, trains=list(train))
    low = th.diff_min_mix_overlap_frac
    text = {"kernels": f"{kernels:.0%} of GPU time is in kernels both ran" if kernels is not None else "",
            "ops": f"{ops:.0%} overlap of CPU op calls per step" if ops is not None else ""}
    if kernels is not None and ops is not None and kernels < low and ops < low:
        out.reasons.append(f"different work: {text['kernels']}, {text['ops']}")
    elif kernels is not None and kernels < low:
        out.warnings.append(f"the kernels barely overlap: {text['kernels']}")
    elif ops is not None and ops < low:
        out.warnings.append(f"the CPU ops barely overlap: {text['ops']}")


def _setting(base, new, out: Comparability) -> None:
    gpus = devices(base), devices(new)
    out.evidence["devices"] = [list(g) for g in gpus]
    if all(gpus) and gpus[0] != gpus[1]:
        out.warnings.append(f"different GPUs: {', '.join(gpus[0])} vs {', '.join(gpus[1])}")
    world = base.run.get("world_size"), new.run.get("world_size")
    out.evidence["world_size"] = list(world)
    if None not in world and world[0] != world[1]:
        out.warnings.append(f"different world size: {world[0]} vs {world[1]}")


def _coverage(base, new, out: Comparability) -> None:
    """A side that is not the whole run: ranks missing, or a run that did not end well."""
    out.evidence["ranks_missing"] = [missing_ranks(a.run) for a in (base, new)]
    for side, a in (("base", base), ("new", new)):
        if ended_badly(a.run):
            out.warnings.append(f"{side} run status: {a.run['status']}")
        missing = missing_ranks(a.run)
        if missing:
            listed = rank_ranges(missing)
            listed = listed if len(listed) <= 80 else listed[:77] + "..."
            analysed = len(a.run.get("ranks_analyzed") or [])
            out.warnings.append(f"{side}: {len(missing)} of {a.run.get('world_size')} ranks "
                                f"missing ({listed}); its steps are those of the {analysed} "
                                "rank(s) analysed")


def comparability(base, new, th: Thresholds) -> Comparability:
    """What stops two analyses being compared, and what differs besides (module doc)."""
    out = Comparability()
    _workload(base, new, th, out)
    _setting(base, new, out)
    _coverage(base, new, out)
    return out
