"""Is it the same model and the same input? Two runs' ``used_step_shapes``
(:mod:`profkit.analyzers.measure.signature`) side by side.

What an optimization leaves alone decides: the model's parameter shapes (a different model
is not comparable), the input at the step boundary (a larger batch is compared per sample or
per token), the user's annotations and module names (named when they change). Each is
compared only where both traces show it: a compiled model or a CUDA-graph replay hides its
module ops, and a trace recorded without ``record_shapes`` shows no shapes at all; what one
side does not show is ``unknown``, never a difference.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from profkit.analyzers.compare.sides import used_rank_steps
from profkit.analyzers.measure.signature import (
    ANNOTATION,
    FIRST,
    INPUT,
    MODULE,
    PARAM,
    RECOMPUTE,
)

SAME, SCALED, DIFFER, BATCH, UNKNOWN = "same", "scaled", "differ", "batch", "unknown"
# Ranges the frameworks open themselves (optimizer, DataLoader, compiled graphs, DDP, NCCL,
# Inductor's compile events): not the user's own annotations.
FRAMEWORK_RANGE_RE = re.compile(
    r"^(?:Optimizer\.|## |enumerate\(DataLoader\)|Torch-Compiled|TorchDynamo|CompiledFunction"
    r"|DistributedDataParallel|FullyShardedDataParallel|FSDP|nccl:|c10d|record_param_comms"
    r"|cudaGraph|autograd::|torch/)|compile_id="
    r"|^(?:Forward|Backward) \d+$")  # torch.distributed.pipelining's microbatch passes
TOKEN_OPS = ("aten::embedding", "aten::embedding_bag")  # every input dim is a token
FEATURE_LAST_OPS = ("aten::linear", "aten::layer_norm", "aten::rms_norm")  # [..., features]
COUNT_DIGITS = 2  # per-step counts are compared at this many decimals


@dataclass
class Workload:
    """One run's signature: per rank-step counts, and the input shape of each used step."""

    params: dict[str, float] = field(default_factory=dict)  # "linear 3072x1024" -> count
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (op, shape) per used step
    firsts: list[str] = field(default_factory=list)  # first tensor shape per used step
    annotations: dict[str, float] = field(default_factory=dict)  # the user's own ranges
    modules: dict[str, float] = field(default_factory=dict)
    recomputed: dict[str, float] = field(default_factory=dict)  # weight ops run again in backward


def workload(analysis) -> Workload:
    """The :class:`Workload` of an analysis (empty where its trace shows nothing)."""
    t = analysis.table("used_step_shapes")
    if t.empty:
        return Workload()
    steps = max(used_rank_steps(analysis), 1)

    def per_step(role: str, key) -> dict[str, float]:
        rows = t[t["role"] == role]
        if rows.empty:
            return {}
        counts = rows.groupby(key(rows))["count"].sum() / steps
        return {str(k): round(float(v), COUNT_DIGITS) for k, v in counts.items()}

    def shapes(role: str) -> pd.DataFrame:
        return t[t["role"] == role].sort_values(["rank", "step"], kind="stable")

    inputs = shapes(INPUT)
    annotations = per_step(ANNOTATION, lambda r: r["name"].astype(str))
    return Workload(
        params=per_step(PARAM, lambda r: r["name"].astype(str).str.removeprefix("aten::")
                        + " " + r["shape"].astype(str)),
        inputs=list(zip(inputs["name"].astype(str), inputs["shape"].astype(str))),
        firsts=shapes(FIRST)["shape"].astype(str).tolist(),
        annotations={k: v for k, v in annotations.items() if not FRAMEWORK_RANGE_RE.search(k)},
        modules=per_step(MODULE, lambda r: r["name"].astype(str)),
        recomputed=per_step(RECOMPUTE, lambda r: r["name"].astype(str)))


def compare_recompute(base: Workload, new: Workload) -> Compared:
    """Activation checkpointing on, off or changed: the layer calls (weight ops) run again
    in the backward pass per step on each side; ``same`` when they match, ``unknown`` when
    neither side records shapes."""
    if not (base.params or base.recomputed) or not (new.params or new.recomputed):
        return Compared(UNKNOWN)
    a, b = (round(sum(w.recomputed.values()), COUNT_DIGITS) for w in (base, new))
    if a == b:
        return Compared(SAME)
    what = ("recompute removed" if not b else "recompute added" if not a else "recompute changed")
    return Compared(DIFFER, f"{what}: {_count(a)} -> {_count(b)} layer calls run again in the "
                    "backward pass per step (activation checkpointing; the same model)",
                    {"recomputed": [a, b]})


# --- parameters -----------------------------------------------------------------------------

@dataclass
class Compared:
    """One aspect of two workloads compared: ``status`` (same / scaled / differ / batch /
    unknown) and the words for it."""

    status: str
    text: str = ""
    detail: dict = field(default_factory=dict)


def _listed(keys, limit: int = 4) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:limit]) + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _count(v: float) -> str:
    return f"{v:g}"


def compare_params(base: Workload, new: Workload) -> Compared:
    """Same parameter shapes, the same ones in proportion (more forward passes per step),
    or a different model: shapes only one side has, or counts that do not scale together
    (more or fewer blocks of the same layers)."""
    a, b = base.params, new.params
    if not a or not b:
        hidden = "either run" if not (a or b) else "base" if not a else "new"
        return Compared(UNKNOWN, f"parameter shapes not recorded in {hidden} (compiled, "
                        "CUDA graphs or no record_shapes)")
    if a == b:
        return Compared(SAME, f"{len(a)} parameter shapes, the same counts per step")
    if a.keys() == b.keys():
        ratios = np.array([b[k] / a[k] for k in a])
        if np.allclose(ratios, ratios[0], rtol=0.01):
            forwards = _forwards(a, b)
            return Compared(SCALED, f"the same parameter shapes, {forwards} forward passes "
                            "per step", {"forward_ratio": float(ratios[0]),
                                         "forwards": _forward_counts(a, b)})
    return Compared(DIFFER, "parameter shapes differ: " + _param_difference(a, b))


def _forwards(a: dict[str, float], b: dict[str, float]) -> str:
    """``12 -> 13``: the count of the rarest shape (the model's once-per-forward layers)."""
    was, now = _forward_counts(a, b)
    return f"{_count(was)} -> {_count(now)}"


def _forward_counts(a: dict[str, float], b: dict[str, float]) -> list[float]:
    key = min(a, key=lambda k: (a[k], k))
    return [a[key], b[key]]


def same_global_batch(params: Compared, inputs: Compared,
                      microbatches: tuple[int, int] | None = None) -> dict | None:
    """More (or fewer) forward passes per step of a batch as much smaller (or larger): the
    microbatches of one global batch (pipeline microbatches, gradient accumulation), not
    another batch. ``microbatches``: the counts where the trace names them (a pipeline's);
    else the forward passes per rank-step. None when it is not that."""
    if params.status != SCALED or inputs.status != BATCH or inputs.detail.get("unit") != "sample":
        return None
    a, b = inputs.detail["samples"]
    ratio = float(params.detail["forward_ratio"])
    if not a or not b or abs(b * ratio - a) > 0.01 * a:
        return None
    counts = list(microbatches) if microbatches else params.detail["forwards"]
    total = a * counts[0]
    text = (f"microbatches {_count(counts[0])} -> {_count(counts[1])} per step, the same "
            f"global batch ({a} x {_count(counts[0])} = {b} x {_count(counts[1])} = "
            f"{_count(total)} samples)")
    return {"microbatches": counts, "samples": [a, b], "global_batch": total, "text": text}


def _by_op(keys, limit: int = 4) -> str:
    """``linear 1024x1024, 3072x1024; embedding 512x1024``: shapes grouped by their op."""
    ops: dict[str, list[str]] = {}
    for key in sorted(keys):
        op, _, shape = key.partition(" ")
        ops.setdefault(op, []).append(shape)
    words = [f"{op} {', '.join(shapes[:limit])}" + (f" and {len(shapes) - limit} more"
                                                    if len(shapes) > limit else "")
             for op, shapes in ops.items()]
    return "; ".join(words)


def _param_difference(a: dict[str, float], b: dict[str, float]) -> str:
    """``4 vs 6 blocks (linear 1024x1024, 1024x4096, ...: 4 vs 6 per step); embedding
    512x1024 only in base, 256x1024 only in new``: the most common change of count among the
    shapes both have (the repeated block), then the shapes one side has."""
    words = []
    changed = [k for k in a.keys() & b.keys() if a[k] != b[k]]
    if changed:
        groups = Counter((a[k], b[k]) for k in changed)
        (was, now), _ = max(groups.items(), key=lambda g: (g[1], -abs(g[0][1] - g[0][0])))
        layers = [k for k in changed if (a[k], b[k]) == (was, now)]
        words.append(f"{_count(was)} vs {_count(now)} blocks ({_by_op(layers)}: "
                     f"{_count(was)} vs {_count(now)} per step)")
    only_a, only_b = a.keys() - b.keys(), b.keys() - a.keys()
    if only_a or only_b:
        words.append(", ".join(w for w in (f"{_by_op(only_a, 3)} only in base" if only_a else "",
                                           f"{_by_op(only_b, 3)} only in new" if only_b else "")
                               if w))
    return "; ".join(words)


# --- the input at the step boundary -----------------------------------------------------------

def _dims(shape: str) -> list[int]:
    return [int(d) for d in shape.split("x")] if shape else []


def tokens(op: str, shape: str) -> int | None:
    """Tokens in one input: every dim of token ids, all but the features of an activation;
    None for an image (or any input whose op does not say)."""
    dims = _dims(shape)
    if op.removeprefix("aten::") in {o.removeprefix("aten::") for o in TOKEN_OPS}:
        return int(np.prod(dims))
    if op in FEATURE_LAST_OPS and len(dims) >= 2:
        return int(np.prod(dims[:-1]))
    return None


def _median_int(values: list[int]) -> int:
    return int(np.median(values))


def compare_inputs(base: Workload, new: Workload) -> Compared:
    """The model's input per step (the first module op's activation): the same, another
    batch (``batch``: ``detail`` holds samples and tokens per step), or other shapes; from
    the first tensor of each step when the model's ops are hidden on a side (there only
    ``same`` or ``unknown``: that tensor may be anything)."""
    if base.inputs and new.inputs:
        a, b = base.inputs, new.inputs
        if set(a) == set(b):  # the same shapes (each side's used steps may be others)
            return Compared(SAME, f"the same input per step ({_shapes(a)})")
        return _batch(a, b)
    if base.firsts and new.firsts:
        if set(base.firsts) == set(new.firsts):
            return Compared(SAME, f"the same first tensor per step ({_shapes(base.firsts)})")
        return Compared(UNKNOWN, f"the steps start from other tensors ({_shapes(base.firsts)} "
                        f"vs {_shapes(new.firsts)}) and the model's input is not recorded")
    return Compared(UNKNOWN, "input shapes not recorded")


def _shapes(items: list) -> str:
    shapes = [s if isinstance(s, str) else f"{s[0].removeprefix('aten::')} {s[1]}" for s in items]
    distinct = list(dict.fromkeys(shapes))
    return ", ".join(distinct[:3]) + (" ..." if len(distinct) > 3 else "")


def _batch(a: list[tuple[str, str]], b: list[tuple[str, str]]) -> Compared:
    """Inputs that differ: samples (the leading dim) and tokens per step on each side."""
    samples = [_median_int([_dims(s)[0] for _, s in side]) for side in (a, b)]
    counts = [[tokens(op, s) for op, s in side] for side in (a, b)]
    toks = [_median_int(c) if None not in c else None for c in counts]
    rest = [{tuple(_dims(s)[1:]) for _, s in side} for side in (a, b)]
    detail = {"samples": samples, "tokens": toks}
    text = f"input {_shapes(a)} vs {_shapes(b)}"
    if rest[0] == rest[1] and samples[0] != samples[1]:
        return Compared(BATCH, f"batch {samples[0]} -> {samples[1]} ({text})",
                        {**detail, "unit": "sample"})
    if None not in toks:
        return Compared(BATCH, f"input shapes differ beyond the batch ({text}): "
                        f"{toks[0]} -> {toks[1]} tokens per step", {**detail, "unit": "token"})
    return Compared(DIFFER, f"input shapes differ beyond the batch ({text})",
                    {**detail, "unit": "sample"})


# --- annotations and modules ------------------------------------------------------------------

def compare_names(what: str, a: dict[str, float], b: dict[str, float]) -> Compared:
    """User annotations or module names: the same set, another set, or not recorded."""
    if not a or not b:
        return Compared(UNKNOWN, f"{what} not recorded on both sides")
    if a.keys() == b.keys():
        return Compared(SAME, f"the same {len(a)} {what}")
    only_a, only_b = a.keys() - b.keys(), b.keys() - a.keys()
    words = [f"{_listed(only_a, 3)} only in base" if only_a else "",
             f"{_listed(only_b, 3)} only in new" if only_b else ""]
    return Compared(DIFFER, f"{what} differ: " + "; ".join(w for w in words if w))
