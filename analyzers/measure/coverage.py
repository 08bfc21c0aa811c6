"""How much of its run an analysis covers: the ranks of the world that were analysed (ranks
left out on purpose with ``--ranks`` are not missing) and how the run ended. The report
header (:mod:`profkit.analyzers.report.header`) and the diff's warnings
(:mod:`profkit.analyzers.compare.comparable`) both read it from here."""

from __future__ import annotations

from typing import Any

BAD_STATUS = ("failed", "incomplete", "running")


def missing_ranks(run: dict[str, Any]) -> list[int]:
    """Ranks of the world that were not analysed (and not left out on purpose); ``run``:
    the analysis' ``run``."""
    world = int(run.get("world_size") or 0)
    analysed = {int(r) for r in run.get("ranks_analyzed") or []}
    selected = run.get("ranks_selected")
    wanted = set(range(world)) if selected is None else {int(r) for r in selected} & set(range(world))
    return sorted(wanted - analysed)


def ended_badly(run: dict[str, Any]) -> bool:
    """Whether the run failed, was cut short or is still running."""
    return run.get("status") in BAD_STATUS
