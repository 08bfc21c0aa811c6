"""Can two runs be compared step for step? Decided from what an optimization does *not*
change (:mod:`.workload`), never from kernel names, which every optimization changes.

- **Another workload** (``reasons``: no improved/regressed verdict): one side trains
  (backward ops, optimizer steps) and the other does not, or the model's parameter shapes
  differ (another model: more blocks, other widths). A step of one is not a step of the
  other, so the ratio of their times says nothing about a change.
- **Another batch** (``batch``): the same model fed more samples (or tokens) per step; the
  diff compares time per sample (or per token) and says so.
- **Another setting** (``warnings``: the verdict stands, flagged): other GPU models, another
  world size, inputs that differ beyond the batch, other module names. Comparing one
  workload on other hardware or at another scale is a question users ask on purpose.
- **Part of a run** (``warnings``): a side missing ranks of its world, or whose run did not
  end well (:mod:`profkit.analyzers.measure.coverage`, what the report header says too):
  its step times are those of the ranks analysed, and a straggler among the missing is not
  seen.
- **Besides** (``notes``): user annotations renamed, more forward passes per step, activation
  recompute on or off (layer calls run again in the backward pass, never counted as more
  blocks): said, not held against the verdict.
- **Microbatches** (``evidence["microbatches"]``): more forward passes per step of a batch
  as much smaller, one global batch (pipeline microbatches, gradient accumulation): the
  same work per step, judged per step and named, not taken for another batch.

Where neither the parameter shapes nor the step inputs are recorded on both sides (traces
without ``record_shapes``, CUDA-graph replays), the mix of work decides as before: the share
of kernel time in kernels both ran *and* the overlap of CPU op calls per step both below
``diff_min_mix_overlap_frac`` is another workload, one of them low a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from profkit.analyzers.compare import workload as W
from profkit.analyzers.compare.sides import (  # noqa: F401 (re-exported: the diff's readers)
    devices,
    per_name,
    trains,
    used_rank_steps,
)
from profkit.analyzers.measure.coverage import ended_badly, missing_ranks
from profkit.analyzers.thresholds import Thresholds

from profkit.textout import plural, rank_ranges


@dataclass
class Comparability:
    reasons: list[str] = field(default_factory=list)  # not the same workload: no verdict
    warnings: list[str] = field(default_factory=list)  # another setting: verdict flagged
    notes: list[str] = field(default_factory=list)  # changed besides, not held against it
    evidence: dict[str, Any] = field(default_factory=dict)
    batch: dict[str, Any] | None = None  # {"unit", "items": [base, new], "text"}


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


def _training(base, new, out: Comparability) -> None:
    train = (trains(base), trains(new))
    out.evidence["trains"] = list(train)
    if None not in train and train[0] != train[1]:
        kinds = ["training (backward ops, optimizer steps)" if t else "inference (no backward)"
                 for t in train]
        out.reasons.append(f"{kinds[0]} vs {kinds[1]}")


def _structure(base, new, out: Comparability) -> bool:
    """Model, input, annotations and modules compared; whether any of model or input was
    recorded on both sides (else the mix of work has to decide)."""
    wb, wn = W.workload(base), W.workload(new)
    params, inputs = W.compare_params(wb, wn), W.compare_inputs(wb, wn)
    names = [W.compare_names("user annotations", wb.annotations, wn.annotations),
             W.compare_names("module names", wb.modules, wn.modules)]
    out.evidence.update(params=params.status, params_text=params.text, inputs=inputs.status,
                        inputs_text=inputs.text, annotations=names[0].status,
                        modules=names[1].status)
    micro = W.same_global_batch(params, inputs, _pipeline_microbatches(base, new))
    if params.status == W.DIFFER:
        out.reasons.append(params.text)
    elif params.status == W.SCALED and micro is None:
        out.notes.append(params.text)
    recompute = W.compare_recompute(wb, wn)
    if recompute.status == W.DIFFER:
        out.notes.append(recompute.text)
        out.evidence["recomputed"] = recompute.detail["recomputed"]
    if micro is not None:  # microbatches of one global batch: the steps are the same work
        out.evidence["microbatches"] = micro
        out.notes.append(micro["text"])
    elif inputs.status in (W.BATCH, W.DIFFER):
        unit = inputs.detail["unit"]
        items = inputs.detail["tokens" if unit == "token" else "samples"]
        out.batch = {"unit": unit, "items": items, "text": inputs.text}
        if "beyond the batch" in inputs.text:  # another model says more than its input
            (out.notes if params.status == W.DIFFER else out.warnings).append(inputs.text)
    if names[0].status == W.DIFFER:
        out.notes.append(names[0].text)
    if names[1].status == W.DIFFER:
        out.warnings.append(names[1].text)
    return params.status != W.UNKNOWN or inputs.status != W.UNKNOWN


def _pipeline_microbatches(base, new) -> tuple[int, int] | None:
    """Microbatches per step of two pipeline runs (analyzers/measure/pipeline.py), else None."""
    tables = [a.table("pipeline_stages") for a in (base, new)]
    if any(t.empty for t in tables):
        return None
    return tuple(int(t["microbatches"].iloc[0]) for t in tables)


def _mix(base, new, th: Thresholds, out: Comparability, decides: bool) -> None:
    kernels, ops = kernel_overlap(base, new), op_overlap(base, new)
    out.evidence.update(kernel_overlap=kernels, op_overlap=ops)
    if not decides:
        return
    low = th.diff_min_mix_overlap_frac
    text = {"kernels": f"{kernels:.0%} of GPU time is in kernels both ran" if kernels is not None else "",
            "ops": f"{ops:.0%} overlap of CPU op calls per step" if ops is not None else ""}
    if kernels is not None and ops is not None and kernels < low and ops < low:
        out.reasons.append(f"different work: {text['kernels']}, {text['ops']}, and no recorded "
                           "shapes show the same model")
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
            analysed = plural(len(a.run.get("ranks_analyzed") or []), "rank")
            out.warnings.append(f"{side}: {len(missing)} of {a.run.get('world_size')} ranks "
                                f"missing ({listed}); its steps are those of the {analysed} "
                                "analysed")


def comparability(base, new, th: Thresholds) -> Comparability:
    """What stops two analyses being compared, and what differs besides (module doc)."""
    out = Comparability()
    _training(base, new, out)
    known = _structure(base, new, out)
    _mix(base, new, th, out, decides=not known)
    _setting(base, new, out)
    _coverage(base, new, out)
    return out
