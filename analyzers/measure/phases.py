"""Inference phases: prefill (the forward over the prompt) and decode (one forward per new
token), found in the trace, each forward with the moment its token is ready.

A **forward** is found, in this order of preference:

1. an engine's own annotation, one per engine step (a forward over the batch):
   ``execute_<tokens>_context_<n>(...)_generation_<m>(...)`` (n requests in prefill, m in
   decode; seen in the SGLang and vLLM traces TraceLens publishes) and SGLang's
   ``step[DECODE bs=32]`` / ``step[EXTEND bs=15 toks=15360]``; the outermost one counts;
2. the token embedding of an eager model: an ``aten::embedding`` whose indices are
   ``[batch, sequence]`` (HF ``generate``: ``[8, 512]`` over the prompt, then ``[8, 1]`` per
   new token); a second embedding before any matmul (GPT-2's position embedding) is the
   same forward;
   each CUDA/HIP graph launch after an eager prefill in the same step is a decode forward
   replayed from a graph (the prefill's batch: static shapes are captured once);
3. a compiled model: each outermost ``Torch-Compiled Region``, its token count the rows of
   its first matmul (``aten::mm [[rows, k], [k, n]]``): the fewest rows in a step are
   decode, more rows prefill.

Sources 2 and 3 need at least two forwards per step and a decode among them, and a rank
with a backward pass (autograd's ``evaluate_function`` ranges) is training, never inference.

A forward's **token is ready** when the last GPU work launched from its start up to the next
forward's start (or the step's end) has finished: the sampling and the stopping check after
the forward belong to its token. The forward's window runs from the previous token's ready
time to its own, so the windows tile the step: with one ``generate`` call per profiler step
(HF), the prefill window starts at the step's start and its end is the time to first
token, and each decode window is one time per output token, as a CUDA-synced timer around
each token reads them.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData

PREFILL, DECODE, MIXED = "prefill", "decode", "mixed"
PHASES = (PREFILL, DECODE, MIXED)
EXECUTE_RE = re.compile(r"^execute_(\d+)_context_(\d+)\(.*\)_generation_(\d+)\(")
SGLANG_RE = re.compile(r"^step\[(DECODE|EXTEND|PREFILL|MIXED)\s+bs=(\d+)(?:\s+toks=(\d+))?\]")
SGLANG_PHASES = {"DECODE": DECODE, "EXTEND": PREFILL, "PREFILL": PREFILL, "MIXED": MIXED}
ANNOTATION_PATTERN = EXECUTE_RE.pattern[1:].split("(")[0] + "|" + r"step\["
EMBEDDING = "aten::embedding"
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::linear", "aten::_scaled_mm", "aten::matmul")
COMPILED_PREFIX = "Torch-Compiled Region"
GRAPH_LAUNCH = "^(?:cuda|hip)GraphLaunch"
REPLAY = "graph replays"
ENGINE = "engine annotation"  # the source of forwards an engine annotated
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
FORWARD_COLUMNS = ("start_ns", "end_ns", "tokens", "batch", "phase", "source")
READ_COLUMNS = [S.TS_NS, S.DUR_NS, S.NAME, S.INPUT_DIMS]  # what the forwards are read from


def dims(text: str) -> list:
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return found if isinstance(found, list) else []


def outermost(frame: pd.DataFrame) -> pd.DataFrame:
    """The ranges no other range of ``frame`` holds (:func:`profkit.intervals.nesting`), in
    time order."""
    frame = frame.sort_values(S.TS_NS, kind="stable")
    start = frame[S.TS_NS].to_numpy(np.int64)
    _, _, parent, order = iv.nesting(start, start + frame[S.DUR_NS].to_numpy(np.int64))
    return frame.iloc[np.sort(order[parent < 0])]


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(FORWARD_COLUMNS))


def engine_forwards(ev: pd.DataFrame) -> pd.DataFrame:
    """One forward per outermost engine-step annotation (module doc, source 1)."""
    ann = outermost(ev.loc[values_in(ev[S.KIND], (S.KIND_ANNOTATION,))
                           & category_mask(ev[S.NAME], ANNOTATION_PATTERN), READ_COLUMNS])
    rows = []
    for ts, dur, name in zip(ann[S.TS_NS], ann[S.DUR_NS], ann[S.NAME].astype(str)):
        if m := EXECUTE_RE.match(name):
            tokens, prefill, decode = (int(g) for g in m.groups())
            phase = MIXED if prefill and decode else PREFILL if prefill else DECODE
            batch = prefill + decode
        elif m := SGLANG_RE.match(name):
            phase, batch = SGLANG_PHASES[m.group(1)], int(m.group(2))
            tokens = int(m.group(3)) if m.group(3) else batch if phase == DECODE else np.nan
        else:
            continue
        rows.append({"start_ns": int(ts), "end_ns": int(ts + dur), "tokens": tokens,
                     "batch": batch, "phase": phase, "source": ENGINE})
    return _frame(rows)


def embedding_forwards(ev: pd.DataFrame) -> pd.DataFrame:
    """One forward per token embedding of ``[batch, sequence]`` indices (module doc, 2)."""
    is_op = values_in(ev[S.KIND], (S.KIND_CPU_OP,))
    emb = outermost(ev.loc[is_op & values_in(ev[S.NAME], (EMBEDDING,)), READ_COLUMNS])
    if emb.empty:
        return _frame([])
    mm_starts = np.sort(ev[S.TS_NS].to_numpy()[is_op & values_in(ev[S.NAME], MATMUL_OPS)])
    rows, last_start = [], None
    for ts, dur, text in zip(emb[S.TS_NS], emb[S.DUR_NS], emb[S.INPUT_DIMS].astype(str)):
        shape = dims(text)
        ids = shape[1] if len(shape) > 1 and isinstance(shape[1], list) else []
        if len(ids) != 2 or not all(isinstance(d, int) and d > 0 for d in ids):
            continue
        if last_start is not None and not _matmul_between(mm_starts, last_start, ts):
            continue  # a second embedding of the same forward (positions)
        last_start = ts
        rows.append({"start_ns": int(ts), "end_ns": int(ts + dur), "tokens": ids[0] * ids[1],
                     "batch": ids[0], "phase": DECODE if ids[1] == 1 else PREFILL,
                     "source": "embedding shapes"})
    return _frame(rows)


def graph_forwards(ev: pd.DataFrame) -> pd.DataFrame:
    """One forward per graph launch, its phase set by :func:`label_replays`."""
    rt = ev.loc[values_in(ev[S.KIND], (S.KIND_RUNTIME, S.KIND_DRIVER))
                & category_mask(ev[S.NAME], GRAPH_LAUNCH), READ_COLUMNS]
    return _frame([{"start_ns": int(ts), "end_ns": int(ts + dur), "tokens": np.nan,
                    "batch": np.nan, "phase": "", "source": REPLAY}
                   for ts, dur in zip(rt[S.TS_NS], rt[S.DUR_NS])])


def label_replays(forwards: pd.DataFrame, step_of: np.ndarray) -> pd.DataFrame:
    """Graph replays after an eager prefill in the same step are decode forwards of its
    batch (one token per sequence); others stay unknown."""
    out = forwards.copy()
    prefill_batch: dict[int, float] = {}
    for i, (step, phase, source) in enumerate(zip(step_of, out["phase"], out["source"])):
        if phase == PREFILL:
            prefill_batch[step] = out["batch"].iat[i]
        elif source == REPLAY and step in prefill_batch:
            out.iloc[i, out.columns.get_loc("phase")] = DECODE
            out.iloc[i, out.columns.get_loc("batch")] = prefill_batch[step]
            out.iloc[i, out.columns.get_loc("tokens")] = prefill_batch[step]
    return out


def _matmul_between(starts: np.ndarray, lo: int, hi: int) -> bool:
    return bool(np.searchsorted(starts, hi) > np.searchsorted(starts, lo, side="right"))


def compiled_forwards(ev: pd.DataFrame) -> pd.DataFrame:
    """One forward per outermost compiled region, its tokens the rows of its first matmul
    (module doc, source 3); the phase is set per step by :func:`label_by_tokens`."""
    regions = outermost(ev.loc[values_in(ev[S.KIND], (S.KIND_CPU_OP, S.KIND_ANNOTATION))
                               & category_mask(ev[S.NAME], "^" + COMPILED_PREFIX), READ_COLUMNS])
    if regions.empty:
        return _frame([])
    ops = ev.loc[values_in(ev[S.KIND], (S.KIND_CPU_OP,)) & values_in(ev[S.NAME], MATMUL_OPS),
                 READ_COLUMNS]
    ops = ops.sort_values(S.TS_NS, kind="stable")
    op_ts = ops[S.TS_NS].to_numpy()
    rows = []
    for ts, dur in zip(regions[S.TS_NS], regions[S.DUR_NS]):
        at = int(np.searchsorted(op_ts, ts))
        tokens = _rows(ops, at) if at < len(op_ts) and op_ts[at] < ts + dur else np.nan
        rows.append({"start_ns": int(ts), "end_ns": int(ts + dur), "tokens": tokens,
                     "batch": np.nan, "phase": "", "source": "compiled regions"})
    return _frame(rows)


def _rows(ops: pd.DataFrame, at: int) -> float:
    """The activation rows of one matmul op (tokens through it); NaN when unreadable."""
    shape = dims(str(ops[S.INPUT_DIMS].iat[at]))
    act = shape[1] if str(ops[S.NAME].iat[at]) == "aten::addmm" and len(shape) > 1 else \
        shape[0] if shape else []
    if not isinstance(act, list) or len(act) < 2 or not all(isinstance(d, int) for d in act):
        return np.nan
    return float(np.prod(act[:-1]))


def label_by_tokens(forwards: pd.DataFrame, step_of: np.ndarray) -> pd.DataFrame:
    """Phases of forwards known only by their token count: per step, the fewest tokens are
    decode (when two forwards or more have them), more tokens prefill."""
    phase = forwards["phase"].to_numpy(object).copy()
    tokens = forwards["tokens"].to_numpy(float)
    for step in np.unique(step_of):
        at = np.flatnonzero((step_of == step) & (phase == ""))
        known = at[np.isfinite(tokens[at])]
        if len(known) < 2:
            continue
        low = tokens[known].min()
        if (tokens[known] == low).sum() < 2:
            continue
        phase[known] = np.where(tokens[known] == low, DECODE, PREFILL)
    return forwards.assign(phase=phase)


def is_training(ev: pd.DataFrame) -> bool:
    """A backward pass anywhere in the trace."""
    return bool(category_mask(ev[S.NAME], "^" + re.escape(BACKWARD_PREFIX)).any())


def find_forwards(rd: RankData, step_of) -> pd.DataFrame:
    """The rank's forwards with their phase (module doc), sorted by start; empty when the
    rank is not inference. ``step_of(starts)`` gives each start's step (-1: none)."""
    ev = rd.events
    found = engine_forwards(ev)
    if found.empty:
        if is_training(ev):
            return _frame([])
        found = embedding_forwards(ev)
        if found.empty:
            found = compiled_forwards(ev)
        elif len(replays := graph_forwards(ev)):
            found = pd.concat([found, replays], ignore_index=True)
        found = found.sort_values("start_ns", kind="stable", ignore_index=True)
        steps = step_of(found["start_ns"].to_numpy())
        found = label_by_tokens(label_replays(found, steps), steps).assign(step=steps)
        per_step = found.groupby("step")["phase"]
        decoding = per_step.transform(lambda p: (p == DECODE).any() and len(p) > 1)
        found = found[decoding.to_numpy(bool) & (found["phase"] != "").to_numpy()]
        return found.reset_index(drop=True)
    found = found.sort_values("start_ns", kind="stable", ignore_index=True)
    return found.assign(step=step_of(found["start_ns"].to_numpy()))
