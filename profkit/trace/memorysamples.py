"""PyTorch's allocator events (Kineto's ``[memory]`` instants) as the memory table.

With ``profile_memory=True`` Kineto writes one instant ('i') event per allocation and free
of the caching allocator: ``{"ph": "i", "name": "[memory]", "ts": 12.5, "args": {"Bytes":
512, "Total Allocated": 2560, "Total Reserved": 4096, "Device Id": 0, "Device Type": 1,
"Addr": 1402}}``; ``Bytes`` is negative on a free and the totals are the allocator's after
the event. An allocation that fails is an ``[OutOfMemory]`` instant with the same args but
the address (``Bytes``: the size asked for), kept with the flag ``out_of_memory``. A trace holds thousands of them per step, so their args are decoded per batch,
in one call, and only the fields read here; a sample with a field that is missing or no
integer in range is dropped alone (counted in the file's problems). Older PyTorch versions
write no totals (only Bytes): their events are not read, and that is no problem of the file.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.columns import ids_to_int, to_float, us_to_ns
from profkit.trace.traceevents import DECODE_ERRORS, InstantEvent

MEMORY_EVENT = "[memory]"
OOM_EVENT = "[OutOfMemory]"  # an allocation the allocator could not make (same args, no Addr)
MAX_BYTES = 1 << 62  # past this no allocator total or allocation size is real
MAX_DEVICE = (1 << 31) - 1
MAX_DEVICE_TYPE = 127  # c10::DeviceType values, kept in an int8 column
ADDR_ABSENT = -1


class MemoryArgs(msgspec.Struct, gc=False):
    """The args of a ``[memory]`` event that profkit reads, as any JSON (checked after)."""

    bytes: Any = msgspec.field(default=None, name="Bytes")
    allocated: Any = msgspec.field(default=None, name="Total Allocated")
    reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    addr: Any = msgspec.field(default=ADDR_ABSENT, name="Addr")


class _IntArgs(MemoryArgs):
    """The same args where each is an integer, as Kineto writes them: the decoder checks
    the types of a whole batch in C, leaving only the ranges to check."""

    bytes: int = msgspec.field(name="Bytes")
    allocated: int = msgspec.field(name="Total Allocated")
    reserved: int = msgspec.field(name="Total Reserved")
    device: int = msgspec.field(name="Device Id")
    device_type: int = msgspec.field(name="Device Type")
    addr: int = msgspec.field(default=ADDR_ABSENT, name="Addr")


class _TypedArgs(msgspec.Struct, gc=False):
    """The same args typed as Kineto writes them, each an integer or null (None, as
    MemoryArgs reads it): what :class:`MemoryInstant` decodes, together with its event."""

    bytes: int | None = msgspec.field(default=None, name="Bytes")
    allocated: int | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | None = msgspec.field(default=None, name="Total Reserved")
    device: int | None = msgspec.field(default=None, name="Device Id")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    addr: int | None = msgspec.field(default=ADDR_ABSENT, name="Addr")


class MemoryInstant(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    """An instant event as :class:`InstantEvent`, its args decoded with it (an object of
    integers or nulls, or null or absent: None), not kept as raw JSON to decode again: a
    decoder of events with this type in place of InstantEvent refuses a batch where an
    instant's args are anything else, and that batch is decoded as before (nativefeed)."""

    name: Any = None
    ts: Any = None
    tid: Any = None
    args: _TypedArgs | None = None


_BATCH = msgspec.json.Decoder(list[_IntArgs])
_ONE = msgspec.json.Decoder(MemoryArgs)
_ABSENT = MemoryArgs()  # the args of an event without any: every field missing
# (column, MemoryArgs attribute, lowest, highest, dtype) of each integer field
_FIELDS = (
    (S.BYTES, "bytes", -MAX_BYTES, MAX_BYTES, np.int64),
    (S.ALLOCATED_BYTES, "allocated", 0, MAX_BYTES, np.int64),
    (S.RESERVED_BYTES, "reserved", 0, MAX_BYTES, np.int64),
    (S.DEVICE, "device", -1, MAX_DEVICE, np.int32),  # CPU events have device -1
    (S.DEVICE_TYPE, "device_type", 0, MAX_DEVICE_TYPE, np.int8),
    (S.ADDR, "addr", ADDR_ABSENT, (1 << 63) - 1, np.int64),
)
_TS, _TID, _ARGS, _NAME = map(attrgetter, ("ts", "tid", "args", "name"))


class MemorySamples:
    """Collects the ``[memory]`` instants of a trace, batch by batch (times in us relative
    to the trace's base time, like its complete events)."""

    def __init__(self, ts_range_us: tuple[float, float]) -> None:
        self.ts_range_us = ts_range_us  # what places a sample within +-MAX_ABS_NS epoch ns
        self.parts: dict[str, list[np.ndarray]] = {}
        self.dropped = 0  # samples without a usable time or with a field that is no integer
        self.without_totals = 0  # samples of an older PyTorch: no allocator totals to read
        self.added = 0  # samples added so far (kept or not)

    def add(self, events: list[InstantEvent] | list[MemoryInstant],
            order: np.ndarray | None = None) -> None:
        """The memory samples of one batch's instant events (all of one of the two types:
        a batch is decoded by one decoder). ``order``: each event's place in the trace,
        where the native reader's columns (:meth:`add_columns`) hold the trace's other
        samples; by default, the order the samples are added in."""
        named = [e.name == MEMORY_EVENT or e.name == OOM_EVENT for e in events]
        mem = [e for e, yes in zip(events, named) if yes]
        if not mem:
            return
        if order is None:
            order = np.arange(self.added, self.added + len(mem))
        else:
            order = np.asarray(order)[np.array(named, dtype=bool)]
        self.added += len(mem)
        decoded = type(mem[0]) is MemoryInstant
        ts = list(map(_TS, mem))
        if not set(map(type, ts)) <= {int, float}:  # to_float would read "12" or True
            ts = [t if type(t) in (int, float) else None for t in ts]
        ts_us = to_float(ts)
        keep = self._in_range(ts_us)
        if decoded:
            args = [_ABSENT if a is None else a for a in map(_ARGS, mem)]
        else:
            args = _decode(list(map(_ARGS, mem)))
        columns = {}
        for column, attr, low, high, dtype in _FIELDS:
            values, ok = (_typed_ints if decoded else _ints)(args, attr, low, high)
            columns[column] = values.astype(dtype)
            keep &= ok
        if not keep.all():
            self._count_dropped(~keep, args)
        tid, _oversized = ids_to_int(list(map(_TID, mem)))  # as the events table reads them
        names = list(map(_NAME, mem))  # each MEMORY_EVENT or OOM_EVENT: checked at once
        failed = (np.array(names, dtype=object) == OOM_EVENT if OOM_EVENT in names
                  else np.zeros(len(mem), dtype=bool))
        self._put_rows(keep, order, ts_us, tid, failed, columns)

    def add_columns(self, samples: dict[str, np.ndarray], tid: np.ndarray) -> None:
        """The samples the native reader read as columns (profkit.trace.native: ts a
        number, every field an integer within +-2**62, all five totals and ids there), with
        their tids as the events table reads them: checked as :meth:`add` checks decoded
        ones."""
        ts_us = samples["ts"]
        if not len(ts_us):
            return
        self.added += len(ts_us)
        keep = self._in_range(ts_us)
        columns = {}
        for column, attr, low, high, dtype in _FIELDS:
            ok = (samples[attr] >= low) & (samples[attr] <= high)
            columns[column] = np.where(ok, samples[attr], 0).astype(dtype)
            keep &= ok
        self.dropped += int(len(keep) - keep.sum())  # every one has its totals: not older
        self._put_rows(keep, samples["index"], ts_us, tid, samples["oom"], columns)

    def _in_range(self, ts_us: np.ndarray) -> np.ndarray:
        lo, hi = self.ts_range_us
        return (ts_us >= lo) & (ts_us <= hi)  # False for NaN

    def _put_rows(self, keep: np.ndarray, order: np.ndarray, ts_us: np.ndarray,
                  tid: np.ndarray, failed: np.ndarray, columns: dict) -> None:
        self._put("order", np.asarray(order, dtype=np.int64)[keep])
        self._put("ts_us", ts_us[keep])
        self._put(S.TID, tid[keep].astype(np.int64))
        self._put(S.OUT_OF_MEMORY, np.asarray(failed, dtype=bool)[keep])
        for column, values in columns.items():
            self._put(column, values[keep])

    def _count_dropped(self, dropped: np.ndarray, args: list[MemoryArgs]) -> None:
        """Count the samples dropped; those of older PyTorch versions, which write Bytes but
        neither total, are no bad values and are counted apart (no problem is noted)."""
        older = np.fromiter((a.allocated is None and a.reserved is None and a.bytes is not None
                             for a in args), bool, len(args))
        self.without_totals += int((dropped & older).sum())
        self.dropped += int((dropped & ~older).sum())

    def _put(self, column: str, values: np.ndarray) -> None:
        self.parts.setdefault(column, []).append(values)

    def frame(self, base_ns: int) -> pd.DataFrame:
        """The memory table (``schema.MEMORY_COLUMNS``) in time order, every step -1 (ingest
        assigns them once the step table is known)."""
        parts = self.parts
        ts_us = np.concatenate(parts["ts_us"]) if parts else np.empty(0)
        # in time order, samples of one time in the trace's order (by whichever path read)
        order = np.lexsort((np.concatenate(parts["order"]), ts_us)) if parts else \
            np.empty(0, dtype=np.int64)
        out = {S.TS_NS: base_ns + us_to_ns(ts_us[order])}
        for column, _attr, _low, _high, dtype in _FIELDS:
            values = np.concatenate(parts[column]) if parts else np.empty(0, dtype)
            out[column] = values[order]
        out[S.STEP] = np.full(len(order), -1, dtype=np.int64)
        out[S.TID] = np.concatenate(parts[S.TID])[order] if parts else np.empty(0, np.int64)
        out[S.OUT_OF_MEMORY] = (np.concatenate(parts[S.OUT_OF_MEMORY])[order] if parts
                                else np.empty(0, bool))
        self.parts = {}
        return pd.DataFrame(out)[list(S.MEMORY_COLUMNS)]

    def problems(self) -> list[str]:
        if not self.dropped:
            return []
        return [f"{self.dropped} memory samples dropped: ts missing or outside the epoch-ns "
                "range, or Bytes, Total Allocated, Total Reserved, Device Id or Device Type "
                "missing or no integer in range"]


def _decode(raws: list[msgspec.Raw]) -> list[MemoryArgs]:
    """The args of each event, in one decode when all are objects of integers (the usual
    case); else one by one, an absent one or one that is no object read as no fields."""
    if all(map(len, raws)):
        try:
            return _BATCH.decode(b"[" + b",".join(raws) + b"]")
        except DECODE_ERRORS:
            pass
    return [_one(r) for r in raws]


def _one(raw: msgspec.Raw) -> MemoryArgs:
    if not len(raw):
        return _ABSENT
    try:
        return _ONE.decode(raw)
    except DECODE_ERRORS:  # not an object, or a number past float range (1e400)
        return _ABSENT


def _typed_ints(args: list, attr: str, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_ints` of one field of decoded :class:`_TypedArgs` (or _ABSENT), whose values
    are ints or None: read in one call where all are ints that fit int64."""
    try:
        arr = np.fromiter(map(attrgetter(attr), args), np.int64, len(args))
    except (TypeError, OverflowError):  # a None, or an int past int64
        return _ints(args, attr, low, high)
    ok = (arr >= low) & (arr <= high)
    return np.where(ok, arr, 0), ok


def _ints(args: list, attr: str, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values of the field ``attr`` of ``args``, whether each is an int within
    [low, high]); 0 where it is not. The usual case, every value a Python int that fits, is
    converted in one call."""
    values = list(map(attrgetter(attr), args))
    if set(map(type, values)) <= {int}:
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            ok = (arr >= low) & (arr <= high)
            return np.where(ok, arr, 0), ok
    ok = np.array([type(v) is int and low <= v <= high for v in values], dtype=bool)
    arr = np.array([v if good else 0 for v, good in zip(values, ok.tolist())], dtype=np.int64)
    return arr, ok
