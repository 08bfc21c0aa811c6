"""The data model: a profiled run and its per-rank tables."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profkit import datacodec
from profkit import schema as S
from profkit.columns import values_in
from profkit.errors import TraceError
from profkit.validate import MAX_OFFSET_NS, int_in


@datacodec.register
@dataclass
class SkippedFile:
    """A file in the run that was not ingested, and why."""

    path: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


def read_each(paths: Iterable[Path], read: Callable[[Path], Any],
              skipped: list[SkippedFile] | None, log: logging.Logger) -> Iterator[tuple[Path, Any]]:
    """(path, read(path)) for each file. A file whose read raises :class:`TraceError` is
    logged and listed in ``skipped`` (the error is raised when there is no such list), so
    that one bad sidecar file never stops the others or the traces."""
    for path in paths:
        try:
            result = read(path)
        except TraceError as exc:
            if skipped is None:
                raise
            log.warning("%s", exc)
            skipped.append(SkippedFile(exc.path, exc.problem))
            continue
        yield path, result


TABLE_ATTRIBUTES = ("events", "collectives", "steps", "counters")  # RankData's own tables


@dataclass
class RankData:
    """Everything known about one rank. Its tables are those of ``schema.RANK_TABLES``, with
    the columns declared there: ``events``, ``collectives``, ``steps`` and ``counters`` (the
    trace's own counter samples and the run's NVML samples) as attributes, any other
    (``memory``: the allocator's events) in ``more``; :meth:`table` reads any of them by name.

    ``meta`` holds the trace's header: ``distributed`` (Kineto's distributedInfo),
    ``devices`` (deviceProperties), ``base_time_ns``, ``host``, ``trace_id``,
    ``process_names``, ``thread_names`` ({"pid:tid": name}, pid and tid as the events
    table holds them) and ``source`` (the trace file).
    """

    rank: int
    path: str
    events: pd.DataFrame
    collectives: pd.DataFrame
    steps: pd.DataFrame
    counters: pd.DataFrame = field(default_factory=lambda: empty_frame(S.COUNTER_COLUMNS))
    meta: dict[str, Any] = field(default_factory=dict)
    rank_source: str = "distributedInfo"  # or "file name", "file order", "run.json"
    # Tables of schema.RANK_TABLES without an attribute of their own here, by name.
    more: dict[str, pd.DataFrame] = field(default_factory=dict)
    _selected: dict | None = field(default=None, init=False, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"<RankData rank {self.rank}: {len(self.events):,} events, "
                f"{len(self.steps)} step(s)>")

    def table(self, name: str) -> pd.DataFrame:
        """The rank table declared as ``name`` in ``schema.RANK_TABLES`` (empty when this
        rank was built without it: a synthetic or test rank)."""
        if name in TABLE_ATTRIBUTES:
            return getattr(self, name)
        if name not in self.more:
            declared = {t.name: t.columns for t in S.RANK_TABLES}
            return empty_frame(declared[name])
        return self.more[name]

    @property
    def gpu_events(self) -> pd.DataFrame:
        return self.of_kinds(S.GPU_KINDS)

    def of_kinds(self, kinds: tuple[str, ...], columns: Iterable[str] | None = None) -> pd.DataFrame:
        """The events of these kinds (``schema.KINDS``): every column, or only ``columns``
        (each selection copies the columns it keeps: a caller reading a few names them).
        Inside :meth:`sharing_selections` each set of kinds is found once and each of its
        columns copied once: a rank's analyzers ask for the same few sets dozens of times."""
        if self._selected is None:
            mask = values_in(self.events[S.KIND], kinds)
            return self.events[mask] if columns is None else self.events.loc[mask, list(columns)]
        shared = self._selected.get(tuple(kinds))
        if shared is None:
            wider = [v for k, v in self._selected.items()  # the kinds' rows are among theirs
                     if isinstance(v, _Selection) and set(kinds) <= set(k)]
            shared = self._selected[tuple(kinds)] = _Selection(
                self.events, kinds, min(wider, key=lambda v: len(v.rows), default=None))
        return shared.frame(self.events, columns)

    def derived(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)``, a table derived from the rank's (``args`` hashable). Inside
        :meth:`sharing_selections` it is computed once per (fn, args) and shared by the
        measurements that ask for it; each caller gets frames of its own (shallow copies:
        a column it adds stays its own, copy-on-write keeps a change to the data its own)."""
        if self._selected is None:
            return fn(self, *args)
        key = ("derived", fn, *args)
        if key not in self._selected:
            self._selected[key] = fn(self, *args)
        return _own(self._selected[key])

    @contextlib.contextmanager
    def sharing_selections(self) -> Iterator[None]:
        """Share :meth:`of_kinds` selections and :meth:`derived` tables for the block; the
        events must not change in it."""
        if self._selected is not None:  # nested: the outer block shares already
            yield
            return
        self._selected = {}
        try:
            yield
        finally:
            self._selected = None

    @property
    def has_gpu(self) -> bool:
        return bool(values_in(self.events[S.KIND], S.GPU_KINDS).any())


def _own(value: Any) -> Any:
    """A shared value as a caller's own: frames (alone or in a tuple) shallow-copied."""
    if isinstance(value, pd.DataFrame):
        return value.copy(deep=False)
    if isinstance(value, tuple):
        return tuple(_own(v) for v in value)
    return value


class _Selection:
    """The rows of the events of some kinds, each column copied from the events once, when
    first asked for; every frame made of them is the caller's own (a column it adds stays
    its own, and copy-on-write keeps a change to a shared column its own too)."""

    def __init__(self, events: pd.DataFrame, kinds: tuple[str, ...],
                 wider: _Selection | None = None) -> None:
        self.rows = np.flatnonzero(values_in(events[S.KIND], kinds))
        self.index = events.index.take(self.rows)
        self.columns: dict[str, pd.Series] = {}
        self.whole: pd.DataFrame | None = None  # every column, once asked for
        # a selection of more kinds, holding these rows: a column it copied already is
        # taken from its copy (a gather from a short column, not from the events' long one)
        self.wider = wider
        self.within = np.searchsorted(wider.rows, self.rows) if wider is not None else None

    def frame(self, events: pd.DataFrame, columns: Iterable[str] | None) -> pd.DataFrame:
        if columns is None and self.whole is not None:
            return self.whole.copy(deep=False)
        names = list(events.columns if columns is None else columns)
        for name in names:
            if name not in self.columns:
                copied = self.wider.columns.get(name) if self.wider is not None else None
                values = events[name].array.take(self.rows) if copied is None \
                    else copied.array.take(self.within)
                self.columns[name] = pd.Series(values, index=self.index, name=name, copy=False)
        out = pd.DataFrame({name: self.columns[name] for name in names}, copy=False,
                           columns=pd.Index(names, dtype=events.columns.dtype))
        if columns is None:
            self.whole = out
            return out.copy(deep=False)
        return out


@dataclass
class Run:
    """One profiled job: metadata plus one :class:`RankData` per rank."""

    path: str
    meta: dict[str, Any]
    ranks: dict[int, RankData]
    skipped: list[SkippedFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nccl: dict[str, pd.DataFrame] = field(default_factory=dict)  # NCCL log / flight-recorder tables
    ncu: pd.DataFrame = field(default_factory=pd.DataFrame)  # Nsight Compute launches (run/ncufiles.py)

    def __repr__(self) -> str:
        """One line (the tables are attributes; a dataclass repr printed them all)."""
        skipped = f", {len(self.skipped)} skipped" if self.skipped else ""
        return (f"<Run {self.path}: {len(self.ranks)} of {self.world_size} rank(s) "
                f"{self.rank_ids}{skipped}>")

    @property
    def world_size(self) -> int:
        return world_size(self.meta, self.ranks)

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    def start_ns(self, ranks: list[int] | None = None) -> int:
        """Earliest event of the given ranks (all by default) on the aligned clock, 0 if none."""
        chosen = [self.ranks[r] for r in (self.rank_ids if ranks is None else ranks)]
        starts = [int(d.events[S.TS_NS].min()) for d in chosen if len(d.events)]
        return min(starts) if starts else 0

    def clock_offset_ns(self, rank: int) -> int:
        """This rank's clock minus rank 0's (subtract it to align), from run.json."""
        return clock_offset_ns(self.meta, rank)


def world_size(meta: dict[str, Any], ranks) -> int:
    """run.json's world size when it declares one, else the highest rank + 1."""
    declared = meta.get("world_size")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
        return declared
    return max(ranks, default=-1) + 1


def clock_offset_ns(meta: dict[str, Any], rank: int) -> int:
    """A rank's clock minus rank 0's from run.json's ``clock_offsets_ns`` (0 if unknown or
    not an integer number of ns within +-2**61; run.json is validated when read, this
    guards metadata built elsewhere)."""
    offsets = meta.get("clock_offsets_ns")
    if not isinstance(offsets, dict):
        return 0
    offset = offsets.get(str(rank), offsets.get(rank))
    return int_in(offset, -MAX_OFFSET_NS, MAX_OFFSET_NS) or 0


def step_spans(steps: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns) of each step: its CPU range joined with the GPU work it launched."""
    cpu_start = steps[S.TS_NS].to_numpy()
    cpu_end = cpu_start + steps[S.DUR_NS].to_numpy()
    gpu_start = steps[S.GPU_START_NS].to_numpy()
    gpu_end = steps[S.GPU_END_NS].to_numpy()
    has_gpu = gpu_start >= 0
    start = np.where(has_gpu, np.minimum(cpu_start, gpu_start), cpu_start)
    end = np.where(has_gpu, np.maximum(cpu_end, gpu_end), cpu_end)
    return start, end


def step_times_ns(steps: pd.DataFrame) -> np.ndarray:
    """Wall time of each step, ns: from the end of the previous step's span to the end of
    this one's (the first step: its whole span). When the CPU runs ahead of the GPU, spans
    overlap and this, not the span length, is the time the job spends per step."""
    start, end = step_spans(steps)
    if len(end) == 0:
        return end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    prev_end = np.concatenate([[start[0]], end[:-1]])
    return end - np.maximum(prev_end, np.minimum(start, end))


def empty_frame(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})
