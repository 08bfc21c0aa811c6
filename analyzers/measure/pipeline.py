"""Pipeline parallelism: whether the run is a pipeline, its stages, microbatches per step and
schedule, and each stage's bubble against the schedule's theory.

Recognised from the point-to-point ops of each rank (``p2p.py``): a pipeline's stages pass
activations forward and gradients back to fixed neighbours with ``send`` / ``recv``. Per
rank, over its used steps:

- the first stage is the rank whose first point-to-point op of a step is a ``send`` (it
  computes its first microbatch from the data, the others wait for theirs); the other
  stages follow in the order their first ``recv`` of the step completes (a stage's first
  activations arrive one stage's forward after its predecessor's). Several first stages
  (pipelines side by side, a data-parallel dimension) give ``ranks / first stages`` stages;
- microbatches per step: the forward passes the pipelining library names
  (``Forward <i>`` ranges of ``torch.distributed.pipelining``, or its multi-stage runtime's
  ``PP:<stage>F<microbatch>`` actions), else the first stage's sends;
- stages per rank: the distinct stages of a rank's ``PP:`` actions; more than one is an
  interleaved (looped) schedule, rank r holding stages r, r+p, ... (its theory below with
  v*m for m);
- the schedule: GPipe when every stage runs all its forwards before any backward, 1F1B
  when a backward comes before the last forward (read from those ranges, else from the end
  stages' point-to-point ops: the first stage sends after a forward and receives before a
  backward, the last stage the other way round);
- each stage's bubble: the ``pipeline_bubble`` part of the charged-time model (the
  point-to-point waits) charges the instants; the stage table reads the share against the
  pipeline's step (:func:`combine_pipeline`).

The theory of a GPipe or 1F1B step of ``p`` stages and ``m`` microbatches of balanced stages
is a bubble of (p-1)/(m+p-1) of the step: the step is (m+p-1) microbatch times. With the
stages' own times measured, the slowest stage paces the rest (:func:`step_model_ns`); at a
fixed global batch each stage's own time stays, split over more microbatches, so ``m'``
microbatches give the step of the same model with ``m'`` (for balanced stages,
1 - ((m'+p-1)/m') / ((m+p-1)/m) shorter), and balanced stages the theory's step.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.measure.p2p import p2p_kernels, p2p_ops
from profkit.analyzers.parts import PARTS
from profkit.analyzers.result import Result

from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData

FORWARD_RE = r"^Forward \d+$"
BACKWARD_RE = r"^Backward \d+$"
# the schedule runtime's actions (PipelineScheduleMulti: interleaved and looped schedules):
# PP:<stage><action><microbatch>, action F forward, B / I / W backward (full, input, weight)
ACTION_RE = re.compile(r"^PP:(\d+)([FBIW])(\d+)$")
ACTION_PATTERN = r"^PP:\d+[FBIW]\d+$"
MICROBATCH_GROWTH = 4  # the advice's microbatches: this many times more, while each keeps a sample
UNBALANCED_X = 1.10  # own time per microbatch this many times the median stage's: unbalanced
STAGE_COLUMNS = ("rank", "stage", "microbatches", "bubble_frac", "theory_frac", "own_ms",
                 "own_ms_per_microbatch", "unbalanced")


def rank_pipeline(data: RankData, used: dict[int, int] | None) -> dict[str, Any] | None:
    """One rank's point-to-point pattern over its used steps (None without any): sends and
    receives per step, its first op, when its first receive completed, the forward and
    backward passes it ran (in order) and the microbatch's leading size."""
    ops = p2p_ops(data.events)
    if ops.empty:
        return None
    steps = sorted(used) if used else sorted(int(s) for s in ops[S.STEP].unique() if s >= 0)
    ops = ops[ops[S.STEP].isin(steps)].sort_values(S.TS_NS, kind="stable") if steps else ops
    if ops.empty:
        return None
    first_step = int(ops[S.STEP].iloc[0])
    mine = ops[ops[S.STEP] == first_step]
    kernels = p2p_kernels(data)
    kernels = kernels[kernels[S.STEP] == first_step]
    recvs = kernels[kernels["op"] == "recv"]
    n = max(len(steps), 1)
    return {"rank": data.rank, "step": first_step,
            "sends": int((ops["op"] == "send").sum()) / n,
            "recvs": int((ops["op"] == "recv").sum()) / n,
            "first_op": str(mine["op"].iloc[0]),
            "first_recv_end_ns": int((recvs[S.TS_NS] + recvs[S.DUR_NS]).iloc[0]) if len(recvs) else -1,
            "passes": _passes(data.events, first_step, mine),
            **_actions(data.events, first_step),
            "microbatch_rows": _leading_size(mine), "gpu_spans": _gpu_spans(data.steps, steps)}


def _gpu_spans(table: pd.DataFrame, steps: list[int]) -> dict[int, int]:
    """{step: ns from its first GPU op's start to its last one's end} of the used steps."""
    rows = table[table[S.STEP].isin(steps) & (table[S.GPU_START_NS] >= 0).to_numpy()]
    return {int(r.step): int(getattr(r, S.GPU_END_NS) - getattr(r, S.GPU_START_NS))
            for r in rows.itertuples(index=False)}


def _passes(ev: pd.DataFrame, step: int, ops: pd.DataFrame) -> str:
    """The step's forward (F) and backward (B) passes in order: the pipelining library's
    ranges, else (marked lower case) the sends (f) and receives (b) of the first stage."""
    host = ev[values_in(ev[S.KIND], (S.KIND_ANNOTATION,)) & (ev[S.STEP] == step).to_numpy()]
    fwd = category_mask(host[S.NAME], FORWARD_RE)
    bwd = category_mask(host[S.NAME], BACKWARD_RE)
    named = host[fwd | bwd].sort_values(S.TS_NS, kind="stable")
    if len(named):
        return "".join("F" if str(n).startswith("F") else "B" for n in named[S.NAME])
    acts = host[category_mask(host[S.NAME], ACTION_PATTERN)].sort_values(S.TS_NS, kind="stable")
    if len(acts):  # the runtime's actions: W (weight gradients) is no pass of its own
        return "".join("F" if a == "F" else "B" for a in
                       (ACTION_RE.match(str(n)).group(2) for n in acts[S.NAME]) if a != "W")
    return "".join("f" if op == "send" else "b" for op in ops["op"])


def _actions(ev: pd.DataFrame, step: int) -> dict[str, int]:
    """The multi-stage runtime's actions in the step: the distinct stages this rank ran
    (``virtual``, 0 without actions) and microbatches (``action_microbatches``)."""
    host = ev[values_in(ev[S.KIND], (S.KIND_ANNOTATION,)) & (ev[S.STEP] == step).to_numpy()]
    names = host[S.NAME][category_mask(host[S.NAME], ACTION_PATTERN)].astype(str)
    found = [ACTION_RE.match(n).groups() for n in names]
    return {"virtual": len({int(st) for st, _, _ in found}),
            "action_microbatches": len({int(mb) for _, act, mb in found if act == "F"})}


def stages_per_rank(ev: pd.DataFrame) -> int:
    """The distinct stages of the rank's ``PP:`` actions over the whole trace (0: none)."""
    host = ev[S.NAME][values_in(ev[S.KIND], (S.KIND_ANNOTATION,))]  # the names alone
    names = host[category_mask(host, ACTION_PATTERN)].astype(str).unique()
    return len({int(ACTION_RE.match(n).group(1)) for n in names})


def _leading_size(ops: pd.DataFrame) -> int:
    """The first dimension of the tensor the first point-to-point op moved (-1 unknown)."""
    for text in ops[S.INPUT_DIMS] if S.INPUT_DIMS in ops else ():
        try:
            dims = json.loads(text) if isinstance(text, str) else None
            while isinstance(dims, list) and dims and isinstance(dims[0], list):
                dims = dims[0]
            if isinstance(dims, list) and dims:
                return int(dims[0])
        except (ValueError, TypeError):
            continue
    return -1


def bubble_theory(stages: int, microbatches: int) -> float:
    """The bubble's share of a GPipe / 1F1B step of balanced stages: (p-1)/(m+p-1)."""
    return (stages - 1) / (microbatches + stages - 1)


def step_model_ns(own_ns: np.ndarray, microbatches: int) -> float:
    """A GPipe / 1F1B step from each stage's own time per step (``own_ns``, the work that is
    not waiting; split evenly over ``microbatches``): the slowest stage paces m-1 of the
    microbatches, and one microbatch crosses every stage, (m-1) max t + sum t. Balanced
    stages give the theory's (m+p-1) t."""
    per = np.asarray(own_ns, float) / microbatches
    return float((microbatches - 1) * per.max() + per.sum())


def combine_pipeline(values: dict[int, Any], steps: pd.DataFrame) -> Result:
    """The run's pipeline (facts: topic ``pipeline``, stages, pipelines, microbatches,
    schedule, theory_frac, period_ms, model_ms, more_microbatches, saving_frac (more
    microbatches), balanced_saving_frac), ``pipeline_stages`` (one row per rank,
    :data:`STAGE_COLUMNS`) and ``pipeline_steps`` (step, step_ns: the pipeline's step, per
    used step); an empty result when the run is not one.

    A stage's bubble is read against the pipeline's step (the first stage's GPU span of a
    step: it starts the first microbatch and ends the last backward): 1 - its own time per
    step (every part but the bubble and held work) / that step. Its own windows are offset
    from the others' (the last stage ends its step early), so its share of them is not."""
    rows = [v for v in values.values() if v]
    firsts = [v for v in rows if v["first_op"] == "send"]
    if len(rows) < 2 or not firsts or len(rows) % len(firsts):
        return Result()
    order = sorted(rows, key=lambda v: (v["first_op"] != "send", v["first_recv_end_ns"]))
    per_stage = len(firsts)
    stages = len(rows) // per_stage
    virtual = max(int(v.get("virtual", 0)) for v in rows) or 1
    micro = firsts[0].get("action_microbatches") or _microbatches(firsts[0], order[-1])
    chunks = micro * virtual  # the schedule's theory and model see v*m microbatches
    used = steps[steps["used"].astype(bool)] if len(steps) else steps
    if stages < 2 or micro < 1 or used.empty:
        return Result()
    own_parts = [p for p in PARTS if p not in ("pipeline_bubble", "idle_other")]
    own = used.assign(own=used[own_parts].sum(axis=1)).groupby("rank")["own"].mean()
    spans = pd.DataFrame([(s, ns) for v in firsts for s, ns in v["gpu_spans"].items()],
                         columns=[S.STEP, "step_ns"]).groupby(S.STEP, as_index=False).median()
    period = float(spans["step_ns"].median()) if len(spans) else float(
        used[used["rank"].isin([v["rank"] for v in firsts])]["step_ns"].median())
    table = pd.DataFrame([{"rank": int(v["rank"]), "stage": i // per_stage,
                           "microbatches": micro, "own_ms": float(own.get(v["rank"], np.nan)) / 1e6}
                          for i, v in enumerate(order)])
    table["bubble_frac"] = (1.0 - table["own_ms"] * 1e6 / period).clip(lower=0.0)
    table["own_ms_per_microbatch"] = table["own_ms"] / micro
    median = float(table["own_ms_per_microbatch"].median())
    table["unbalanced"] = table["own_ms_per_microbatch"] > UNBALANCED_X * median
    table["theory_frac"] = bubble_theory(stages, chunks)
    stage_own = table.groupby("stage")["own_ms"].mean().to_numpy() * 1e6
    model = step_model_ns(stage_own, chunks)
    more = MICROBATCH_GROWTH * micro
    rows_each = order[0].get("microbatch_rows", -1)
    if rows_each > 0:  # no microbatch smaller than one sample
        more = min(more, micro * rows_each)
    balanced = step_model_ns(np.full(stages, stage_own.mean()), chunks)
    facts = {"topic": "pipeline", "stages": stages, "pipelines": per_stage,
             "microbatches": micro, "stages_per_rank": virtual,
             "schedule": "interleaved" if virtual > 1 else _schedule(order),
             "theory_frac": bubble_theory(stages, chunks), "period_ms": period / 1e6,
             "model_ms": model / 1e6, "more_microbatches": more,
             "saving_frac": 1.0 - step_model_ns(stage_own, more * virtual) / model
             if more > micro else 0.0,
             "balanced_saving_frac": max(0.0, 1.0 - balanced / model),
             "median_ms_per_microbatch": median}
    return Result(tables={"pipeline_stages": table[list(STAGE_COLUMNS)],
                          "pipeline_steps": spans}, facts=facts)


def _microbatches(first: dict, last: dict) -> int:
    """Forward passes per step: the library's ranges on the first stage, else its sends
    (each forward sends its activations on)."""
    named = first["passes"].count("F")
    if named:
        return named
    return int(round(first["sends"])) or int(round(last["recvs"]))


def _schedule(order: list[dict]) -> str:
    """``gpipe``, ``1f1b`` or ``""`` (not seen) from the passes of every stage."""
    seen = [v["passes"] for v in order if v["passes"].isupper()]
    if not seen:  # no library ranges: the end stages' sends and receives: the first sends
        # activations (forward) and receives gradients, the last the other way round (with
        # m <= p, 1F1B's first stage runs every forward first: only the last shows it)
        swap = str.maketrans("fb", "bf")
        seen = [p.upper() for p in (order[0]["passes"], order[-1]["passes"].translate(swap))
                if p]
    if not seen or "B" not in "".join(seen):
        return ""
    if all("B" not in p or "F" not in p[p.index("B"):] for p in seen):
        return "gpipe"
    return "1f1b"


def stage_names(table: pd.DataFrame, mask: np.ndarray) -> list[str]:
    """'stage 3 (rank 3)' for the rows of ``mask``."""
    return [f"stage {int(r.stage)} (rank {int(r.rank)})"
            for r in table[mask].itertuples(index=False)]
