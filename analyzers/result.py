"""What every analyzer returns: named tables plus typed findings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from profkit import datacodec

SEVERITIES = ("info", "warning", "critical")


@datacodec.register
@dataclass(frozen=True)
class Finding:
    """One observation with its evidence and what to change. ``rank``/``step`` are None for
    run-wide findings. ``evidence`` holds plain numbers and strings (JSON-ready)."""

    def with_saving(self, ms_per_step: float, fraction: float, per: str = "") -> Finding:
        """This finding saving ``ms_per_step`` (``fraction`` of the step); ``per`` names the
        steps it is per when they are not the rank's used steps (``"compiling step"``)."""
        from dataclasses import replace

        saving = {"ms_per_step": round(float(ms_per_step), 3), "fraction": round(float(fraction), 4)}
        return replace(self, estimated_saving={**saving, **({"per": per} if per else {})})

    category: str
    severity: str
    message: str
    recommendation: str
    evidence: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None
    step: int | None = None
    estimated_saving: dict[str, float] | None = None
    """What removing this cause would save: ``{"ms_per_step": x, "fraction": f}`` (f of the
    step time of the rank, or of the others for a straggler; with ``"per"`` when the steps are
    others than the rank's used steps: ``"compiling step"``); None when not estimated."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Result:
    """The output of one analyzer: tables by name, facts, and (once judged) findings."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    """What a measurement knows besides its tables that its findings need (plain values,
    rows and frames); ``topic`` names the measurement that made it (its entry in
    :data:`profkit.analyzers.measurements.MEASUREMENTS`, whose judge reads it; ``no_gpu``: it
    needed GPU events the run lacks); a result without one is not judged.
    Measurements fill tables and facts, never findings."""
