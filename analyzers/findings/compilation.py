"""The finding about compilation inside the profiled steps (``compilation`` table,
:mod:`profkit.analyzers.measure.compilation`): which steps compiled, for how long, in which
phase, and what to change.

A step that compiles is left out of the verdict (``steps.choose_steps``), so this finding is
where its cost is said. Compiles in several steps are recompiles: a new input shape fails
Dynamo's guards every time, and the fix is a dynamic or bucketed shape. A single compiling
step is the first compile (or a new shape) caught by the profiler: compile before profiling.
"""

from __future__ import annotations

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.measure.compilation import COMPILE_NS, FRAME_COMPILES, PHASE_COLUMNS
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.result import Finding
from profkit.analyzers.thresholds import Thresholds

from profkit import schema as S

RECOMPILE_ADVICE = (
    "Stop recompiling: each new input shape fails Dynamo's guards and compiles the model "
    "again. Mark the dimension that changes dynamic (torch._dynamo.mark_dynamic(x, dim) before "
    "the call, or torch.compile(dynamic=True)), or pad / bucket the inputs to a few fixed "
    "shapes (e.g. lengths rounded up to a multiple of 64) so that each compiles once; "
    "TORCH_LOGS=recompiles names the guard that fails. Then compile before profiling starts: "
    "warm-up steps with every shape outside the profiler's active window "
    "(torch.profiler.schedule(wait=..., warmup=...)).")
WARMUP_ADVICE = (
    "Compile before profiling starts: run warm-up steps (one per input shape) outside the "
    "profiler's active window (torch.profiler.schedule(wait=..., warmup=...)), so that the "
    "profiled steps show the steady state. If the compile comes from a new input shape, mark "
    "that dimension dynamic (torch._dynamo.mark_dynamic(x, dim)) or bucket the shapes.")


def compile_findings(compilation: pd.DataFrame, steps: pd.DataFrame,
                     th: Thresholds) -> list[Finding]:
    """One finding per rank with steps that compiled for at least ``th.compile_step_frac`` of
    their time (the steps left out of the verdict for it)."""
    if compilation is None or compilation.empty:
        return []
    rows = compilation[compilation[COMPILE_NS] >= th.compile_step_frac
                       * compilation["step_ns"].clip(lower=1)]
    recorded = steps.groupby("rank")[S.STEP].apply(lambda s: int((s >= 0).sum())) \
        if len(steps) else pd.Series(dtype=int)
    return [_finding(int(rank), group, int(recorded.get(rank, 0)))
            for rank, group in rows.groupby("rank")]


def _finding(rank: int, rows: pd.DataFrame, recorded: int) -> Finding:
    n = len(rows)
    numbered = [int(s) for s in rows[S.STEP] if s >= 0]
    compile_ms = rows[COMPILE_NS].to_numpy(float) / 1e6
    step_ms = rows["step_ns"].to_numpy(float) / 1e6
    every = recorded > 0 and n >= recorded
    where = (f"every profiled step ({n} of {recorded}: {rank_ranges(numbered)})" if every
             else f"{n} of {recorded} profiled steps ({rank_ranges(numbered)})" if numbered
             else "the profiled window")
    rest_ms = step_ms - compile_ms
    evidence = {
        "compiling_steps": numbered, "steps_recorded": recorded,
        "compile_ms_per_step": round(float(compile_ms.mean()), 3),
        "compiling_step_ms": round(float(step_ms.mean()), 3),
        "compile_frac": round(float(compile_ms.sum() / max(step_ms.sum(), 1e-9)), 4),
        "rest_ms_per_step": round(float(rest_ms.mean()), 3),
        "frame_compiles": int(rows[FRAME_COMPILES].sum()),
        "phase_ms_per_step": {c.removesuffix("_ns"): round(float(rows[c].mean()) / 1e6, 3)
                              for c in PHASE_COLUMNS if rows[c].sum() > 0},
    }
    repeated = n >= 2
    of = "those steps" if numbered else "the window"
    message = (f"rank {rank}: torch.compile compiles inside {where}: "
               f"{_each(compile_ms, 'of compilation')}, {U.pct(evidence['compile_frac'])} of "
               f"{of} (the rest: {_each(rest_ms)}); "
               + ("recompiles, " if repeated else "")
               + "left out of the verdict")
    return Finding(category="compile",
                   severity="critical" if every and repeated else "warning" if repeated else "info",
                   rank=rank, message=message, evidence=evidence,
                   recommendation=RECOMPILE_ADVICE if repeated else WARMUP_ADVICE)


def _each(values_ms, what: str = "") -> str:
    """'2602 to 3030 ms of compilation each' over several steps, '1201 ms of compilation' for
    one."""
    low, high = float(min(values_ms)), float(max(values_ms))
    text = U.ms(low) if low == high else U.ms_range(low * 1e6, high * 1e6)
    return text + (f" {what}" if what else "") + (" each" if len(values_ms) > 1 else "")
