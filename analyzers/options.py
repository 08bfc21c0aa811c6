"""What the user asked of an analysis besides thresholds: which steps, and what marks one."""

from __future__ import annotations

from dataclasses import dataclass

from profkit import datacodec


@datacodec.register
@dataclass(frozen=True, kw_only=True)
class AnalysisOptions:
    step_marker: str | None = None
    """Name (or regex) of a host range that marks one step, for traces without
    ``ProfilerStep#`` ranges (``--step-marker train_step``)."""
    steps: tuple[int, int] | None = None
    """Use exactly the steps numbered lo..hi (inclusive; ``--steps A:B``) instead of leaving
    out the first/last recorded and one-off steps automatically."""

    def key(self) -> str:
        """A stable text for cache keys."""
        return f"marker={self.step_marker}|steps={self.steps}"


DEFAULT_OPTIONS = AnalysisOptions()
