"""``profkit.analyze`` and ``profkit.diff``: the analysis of a run, and the comparison of two,
for runs given as :class:`profkit.model.Run` objects or as paths (a run directory, a folder
of torch.profiler traces, or one trace file), loaded with :func:`profkit.run.loader.load_run`."""

from __future__ import annotations

import os

from profkit.analyzers.analyze import Analysis
from profkit.analyzers.analyze import analyze as analyze_run
from profkit.analyzers.compare.diff import Diff, diff_runs

from profkit.model import Run
from profkit.run.loader import load_run

RunLike = Run | str | os.PathLike


def _run(run: RunLike) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def analyze(run: RunLike) -> Analysis:
    """The verdict, tables and findings of ``run`` (shown as HTML in a notebook)."""
    return analyze_run(_run(run))


def diff(base: RunLike, new: RunLike,
         items_per_step: tuple[float, float] | None = None) -> Diff:
    """Did the change from ``base`` to ``new`` help? (shown as HTML in a notebook).
    ``items_per_step``: samples (or tokens) one step of each processed, to judge the time
    per item when the trace cannot show the batch."""
    return diff_runs(_run(base), _run(new), items_per_step=items_per_step)
