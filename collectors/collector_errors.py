"""Errors raised by the capture side. All derive from :class:`profkit.errors.ProfkitError`."""

from __future__ import annotations

from profkit.errors import ProfkitError


class CollectorError(ProfkitError):
    """Capture cannot proceed (bad configuration, unusable output directory)."""


class OutputDirError(CollectorError):
    """The run directory cannot be created, is not writable or lacks free space."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class NcuError(CollectorError):
    """``profkit ncu`` cannot measure: Nsight Compute is missing, may not read the
    counters, the GPU is not NVIDIA's, or ncu measured nothing. The run is left as it was."""

    exit_code = 9  # 8 is profkit diff --fail-if-slower
