"""Turning --steps / --window options into an aligned-clock time window."""

from __future__ import annotations

import math

from profkit import schema as S
from profkit.errors import UsageError
from profkit.model import Run, step_spans
from profkit.textout import rank_ranges
from profkit.timeline.merge import Window


def window_for(run: Run, steps: tuple[float, float] | None,
               window_ms: tuple[float, float] | None) -> Window:
    """Steps A:B (inclusive, ProfilerStep numbers) span the earliest start to the latest end
    of those steps over all ranks; START_MS:END_MS counts from the run's first event."""
    if steps and window_ms:
        raise UsageError("give --steps or --window, not both")
    if window_ms:
        start = run.start_ns()
        lo, hi = window_ms
        return Window(None if math.isinf(lo) else start + int(lo * 1e6),
                      None if math.isinf(hi) else start + int(hi * 1e6))
    if steps:
        lo, hi = steps
        spans = []
        for data in run.ranks.values():
            st = data.steps[(data.steps[S.STEP] >= lo) & (data.steps[S.STEP] <= hi)]
            if len(st):
                starts, ends = step_spans(st)
                spans.append((int(starts.min()), int(ends.max())))
        if not spans:
            have = sorted({int(n) for d in run.ranks.values() for n in d.steps[S.STEP] if n >= 0})
            has = f"the run has steps {rank_ranges(have)}" if have else "the run has none"
            raise UsageError(f"--steps {lo:g}:{hi:g}: no rank has ProfilerSteps in that range "
                             f"({has})")
        return Window(min(s for s, _ in spans), max(e for _, e in spans))
    return Window()
