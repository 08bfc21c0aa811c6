"""The data model: a profiled run and its per-rank tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from profkit import schema as S


@dataclass
class SkippedFile:
    """A file in the run that was not ingested, and why."""

    path: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass
class RankData:
    """Everything known about one rank. Tables use the columns in :mod:`profkit.schema`.

    ``meta`` holds the trace's header: ``distributed`` (Kineto's distributedInfo),
    ``devices`` (deviceProperties), ``base_time_ns``, ``host``, ``trace_id``,
    ``process_names`` and ``source`` (the trace file).
    """

    rank: int
    path: str
    events: pd.DataFrame
    collectives: pd.DataFrame
    steps: pd.DataFrame
    counters: pd.DataFrame = field(default_factory=lambda: empty_frame(S.COUNTER_COLUMNS))
    meta: dict[str, Any] = field(default_factory=dict)
    rank_source: str = "distributedInfo"  # or "file name", "file order", "run.json"

    @property
    def gpu_events(self) -> pd.DataFrame:
        return self.events[self.events[S.KIND].isin(S.GPU_KINDS)]

    @property
    def has_gpu(self) -> bool:
        return bool(self.events[S.KIND].isin(S.GPU_KINDS).any())


@dataclass
class Run:
    """One profiled job: metadata plus one :class:`RankData` per rank."""

    path: str
    meta: dict[str, Any]
    ranks: dict[int, RankData]
    skipped: list[SkippedFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nccl: dict[str, pd.DataFrame] = field(default_factory=dict)  # NCCL log / flight-recorder tables

    @property
    def world_size(self) -> int:
        declared = self.meta.get("world_size")
        if isinstance(declared, int) and declared > 0:
            return declared
        return max(self.ranks, default=-1) + 1

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    def clock_offset_ns(self, rank: int) -> int:
        """This rank's clock minus rank 0's (subtract it to align), from run.json."""
        offsets = self.meta.get("clock_offsets_ns") or {}
        return int(offsets.get(str(rank), offsets.get(rank, 0)) or 0)


def empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
