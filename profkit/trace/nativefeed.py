"""Feeding the native reader's columns (profkit.trace.native) into an :class:`Accumulator`.

Every rule stays where it is: the fast events' columns go through the same steps as
:meth:`Accumulator.add` (the epoch range, durations, coding of names, categories and shapes,
kinds, the args read per kind, FLOPs and costs from shapes, collective args), vectorised
over numpy columns instead of per decoded event. The events the native reader left to Python
are decoded by the Python reader's own decoder, in file order: metadata, counters and
instants go to their collectors, complete events to :meth:`Accumulator.add` at their place
among the fast rows, so rows, codes and their order are those of the pure-Python reader
(tests/test_native_reader.py checks that on every bundled, public and corpus trace).
"""

from __future__ import annotations

from collections import Counter
from typing import Union, get_args

import msgspec
import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify.events import LEGACY_PID_CATEGORY
from profkit.columns import stable_id, unique_rows
from profkit.trace.memorysamples import MemoryInstant
from profkit.trace.native import ARG_FIELDS, NO_SEQ, RAW_FIELDS, NativeScan, join_spans
from profkit.trace.opargs import dims_text, shape_costs
from profkit.trace.traceevents import (
    BATCH_DECODER,
    DECODE_ERRORS,
    AnyEvent,
    CounterEvent,
    Event,
    InstantEvent,
    Meta,
    decode_lenient,
    without_raw,
)

BATCH_EVENTS = 10_000  # the other events decoded at a time (as tracefile.BATCH_EVENTS)
_ARG_KINDS = {  # the kinds each numeric arg is read for (accumulate._ARG_COLUMNS)
    "stream": S.GPU_KINDS, "device": S.GPU_KINDS, "blocks_per_sm": (S.KIND_KERNEL,),
    "occupancy_pct": (S.KIND_KERNEL,), "flops": (S.KIND_CPU_OP,),
    "bytes": (S.KIND_MEMCPY, S.KIND_MEMSET)}
# BATCH_DECODER with the instants' args decoded with them (memorysamples.MemoryInstant): the
# allocator's ~26k samples a rank are decoded once, not their args again from raw JSON.
_OTHER_DECODER = msgspec.json.Decoder(list[Union[tuple(  # noqa: UP007 - a union built from a tuple
    MemoryInstant if t is InstantEvent else t for t in get_args(AnyEvent))]])
_INSTANTS = (InstantEvent, MemoryInstant)


def feed(acc, scan: NativeScan, repairs: Counter) -> None:
    """Every event of the scanned trace into ``acc``, as the pure-Python reader adds them."""
    rows = _Rows(scan)
    acc.memory.add_columns(scan.memory, _memory_tids(scan))
    fast_index = scan.columns["index"]
    pos = 0
    for index, records in _other_events(acc, scan, repairs):
        at = int(np.searchsorted(fast_index, index))  # the fast rows before these events
        if at > pos:
            rows.add(acc, pos, at)
            pos = at
        acc.add(records)
    if len(fast_index) > pos:
        rows.add(acc, pos, len(fast_index))


def _other_events(acc, scan: NativeScan, repairs: Counter):
    """(event index, [complete events]) of each run of complete events among the events the
    native reader left to Python, in file order; their metadata, counter and instant events
    go to ``acc``'s collectors on the way."""
    index, start, end = scan.other["index"], scan.other["start"], scan.other["end"]
    run: list = []
    run_at = -1
    for lo in range(0, len(index), BATCH_EVENTS):
        hi = min(lo + BATCH_EVENTS, len(index))
        records = _decode_other(scan.kept, start[lo:hi], end[lo:hi], repairs)
        acc.metadata.extend(e for e in records if type(e) is Meta)
        acc.counters.add([e for e in records if type(e) is CounterEvent])
        instants = [j for j, e in enumerate(records) if type(e) in _INSTANTS]
        acc.memory.add([records[j] for j in instants], index[lo:hi][instants])
        fast = scan.columns["index"]
        for i in [j for j, rec in enumerate(records, lo) if type(rec) is Event]:
            rec = records[i - lo]
            ev_index = int(index[i])
            if run and np.searchsorted(fast, ev_index) != np.searchsorted(fast, run_at):
                yield run_at, run
                run = []
            if not run:
                run_at = ev_index
            run.append(rec)
    if run:
        yield run_at, run


def _memory_tids(scan: NativeScan) -> np.ndarray:
    """The tids of the allocator samples the native reader read, as the events table reads
    them (columns.ids_to_int: an int as it is, a text tid by its stable id)."""
    tid, text = scan.memory["tid"], scan.memory["tid_text"]
    if not (text >= 0).any():
        return tid
    ids = np.unique(text[text >= 0])
    mapped = np.array([stable_id(scan.strings[i]) for i in ids.tolist()], dtype=np.int64)
    return np.where(text >= 0, mapped[np.searchsorted(ids, np.maximum(text, 0))], tid)


def _decode_other(raw, starts: np.ndarray, ends: np.ndarray, repairs: Counter) -> list:
    """:func:`_decode` of the spans, their instants' args decoded with them
    (:data:`_OTHER_DECODER`) where each is what Kineto writes (an object of integers or
    nulls, or none); else (a value of another type, or what the typed decoder refuses)
    by :func:`_decode`, as before."""
    try:
        return _OTHER_DECODER.decode(join_spans(raw, starts, ends))
    except DECODE_ERRORS:
        return _decode(raw, starts, ends, repairs)


def _decode(raw, starts: np.ndarray, ends: np.ndarray, repairs: Counter) -> list:
    """The events of the spans, decoded as tracefile.Trace.batches does (None for one the
    lenient path drops, so that the list stays aligned with the spans)."""
    try:
        return BATCH_DECODER.decode(join_spans(raw, starts, ends))
    except DECODE_ERRORS:
        out = []
        for s, e in zip(starts.tolist(), ends.tolist()):
            kept = decode_lenient([msgspec.Raw(bytes(raw[s:e]))], repairs)
            out.append(kept[0] if kept else None)
        return out


class _RawArgs:
    """The args accumulate's shape costs read of one fast event: its raw JSON args and its
    sequence number."""

    __slots__ = ("input_dims", "input_types", "input_strides", "concrete_inputs", "seq_number")

    def __init__(self, raws: tuple, seq_number) -> None:
        self.input_dims, self.input_types, self.input_strides, self.concrete_inputs = raws
        self.seq_number = seq_number


class _RowArgs:
    """The args of one fast row as _RawArgs has them, each read from the scan's columns
    only when asked for (the convolution links read only the sequence number)."""

    __slots__ = ("_rows", "_row")

    def __init__(self, rows: _Rows, row: int) -> None:
        self._rows, self._row = rows, row

    def _raw(self, k: int) -> bytes:
        i = int(self._rows.raw_columns[k][self._row])
        return self._rows.no_raw if i < 0 else self._rows.scan.raw[i]

    input_dims = property(lambda self: self._raw(0))
    input_types = property(lambda self: self._raw(1))
    input_strides = property(lambda self: self._raw(2))
    concrete_inputs = property(lambda self: self._raw(3))

    @property
    def seq_number(self) -> int | None:
        seq = int(self._rows.col["seq"][self._row])
        return None if seq == NO_SEQ else seq


class _LazyArgs:
    """``args[i]`` of the rows of one add, built only for the rows that are asked for."""

    def __init__(self, rows: _Rows, at: np.ndarray) -> None:
        self.rows, self.at = rows, at

    def __len__(self) -> int:
        return len(self.at)

    def __getitem__(self, i: int):
        return _RowArgs(self.rows, int(self.at[i]))


class _LazyNames(_LazyArgs):
    def __getitem__(self, i: int):
        code = self.rows.col["name"][self.at[i]]
        return None if code < 0 else self.rows.scan.strings[code]


class _Rows:
    """The scan's fast rows, and the per-trace state of coding them (lut: scan string id
    + 1 -> code of each Codes, -1 until coded; 0 stands for a missing value)."""

    def __init__(self, scan: NativeScan) -> None:
        self.scan, self.col = scan, scan.columns
        self.luts: dict[int, np.ndarray] = {}
        self.no_raw = b""
        self.coll_rows = np.flatnonzero(scan.columns["coll"])  # rows of scan.coll's spans
        self.raw_columns = [scan.columns[f"raw{k}"] for k in range(len(RAW_FIELDS))]

    def add(self, acc, lo: int, hi: int) -> None:
        """The fast rows lo:hi into ``acc`` (the steps of Accumulator.add). Where no row is
        dropped, columns are read as slices and a column that needs no change (ts, the ids,
        args no row of another kind carries) goes into ``acc`` as a view of the scan's: the
        rows are not copied for nothing (a large rank's peak is ~0.1x its JSON less)."""
        from profkit.trace.accumulate import _KIND_CODE

        col = self.col
        ts_us = col["ts"][lo:hi]
        placed = (ts_us >= acc.ts_range_us[0]) & (ts_us <= acc.ts_range_us[1])
        at = slice(lo, hi)  # the rows, as a slice while none is dropped
        if not placed.all():
            acc.dropped_ts += int(len(placed) - placed.sum())
            at = np.arange(lo, hi)[placed]
            ts_us = ts_us[placed]
        rows = np.arange(lo, hi) if isinstance(at, slice) else at
        cat_codes = self._legacy(acc, self._encode(acc.cats, col["cat"][at], self.scan.strings),
                                 col["cat"][at], col["pid_text"][at])
        name_codes = self._encode(acc.names, col["name"][at], self.scan.strings)
        acc._extend_kinds()
        kind = np.asarray(acc.cat_kind_code, dtype=np.int8)[cat_codes]
        acc._put("ts_us", ts_us)
        acc._put(S.DUR_NS, acc._dur_ns(col["dur"][at]))
        acc._put(S.NAME, name_codes)
        acc._put(S.CAT, cat_codes)
        for column in (S.PID, S.TID):
            acc._put(column, self._ids(col[column][at], col[f"{column}_text"][at]))
        for field, column in zip(ARG_FIELDS, _arg_columns()):
            values = col[f"arg{ARG_FIELDS.index(field)}"][at]
            kinds = _ARG_KINDS.get(field)
            if kinds is not None:
                wanted = np.zeros(len(S.KINDS), dtype=bool)
                wanted[[_KIND_CODE[k] for k in kinds]] = True
                unwanted = ~wanted[kind] & ~np.isnan(values)
                if unwanted.any() or column == S.FLOPS:  # FLOPs are changed in place below
                    values = values.copy()
                    values[unwanted] = np.nan
            if column == S.FLOPS:
                acc._add_shape_costs(values, name_codes, _LazyNames(self, rows),
                                     _LazyArgs(self, rows), self._shape_hits(acc, at))
            acc._put(column, values)
        dims = col["raw0"][at].copy()
        dims[kind != _KIND_CODE[S.KIND_CPU_OP]] = -1
        acc._put(S.INPUT_DIMS, self._encode(acc.dims, dims, self.scan.raw, dims_text))
        coll = np.flatnonzero(col["coll"][at])
        if len(coll):  # the few rows with collective args: decoded whole, at once
            span = np.searchsorted(self.coll_rows, rows[coll])
            events = BATCH_DECODER.decode(join_spans(self.scan.kept, self.scan.coll["start"][span],
                                                     self.scan.coll["end"][span]))
            for i, event in zip(coll.tolist(), events):
                acc.coll_args[acc.rows + i] = without_raw(event.args)
        acc.rows += len(rows)

    def _shape_hits(self, acc, at):
        """Accumulator._shape_hits for the rows ``at``: the rows of wanted names with Input
        Dims, their costs worked out once per distinct (name, raw args), from the scan's
        ids, with the accumulator's memo (its keys as _shape_hits makes them), and the
        distinct one of each row."""
        from profkit.trace.accumulate import MAX_MEMO

        def hits_of(name_codes: np.ndarray, names, args) -> tuple:
            keys = [self.col["name"][at], *(raw[at] for raw in self.raw_columns)]
            rows = np.flatnonzero(acc._wanted_names()[name_codes] & (keys[1] >= 0))
            if not len(rows):
                return [], [], None
            uniq, inverse, _ = unique_rows([key[rows] for key in keys])
            memo, found = acc.memo, []
            for name_id, *raw_ids in uniq.tolist():
                name = self.scan.strings[name_id]
                a = _RawArgs(tuple(self.no_raw if r < 0 else self.scan.raw[r] for r in raw_ids),
                             None)
                key = (name, a.input_dims, a.input_types, a.concrete_inputs, a.input_strides)
                hit = memo.get(key)
                if hit is None:
                    if len(memo) >= MAX_MEMO:
                        memo.clear()
                    hit = memo[key] = shape_costs(name, a, acc.conv_links.links(name))
                found.append(hit)
            return rows.tolist(), found, inverse.reshape(-1)

        return hits_of

    def _legacy(self, acc, cat_codes: np.ndarray, cats: np.ndarray,
                pid_texts: np.ndarray) -> np.ndarray:
        """A pre-Kineto export's events without a "cat": their category from their pid's
        name (classify.legacy_categories, as the Python reader reads them)."""
        missing = (cats < 0) & (pid_texts >= 0)
        if not missing.any():
            return cat_codes
        out = cat_codes.copy()
        for i in np.flatnonzero(missing).tolist():
            cat = LEGACY_PID_CATEGORY.get(self.scan.strings[pid_texts[i]])
            if cat is not None:
                out[i] = acc.cats._code(cat)
        return out

    def _encode(self, codes, local: np.ndarray, values: list, text=str) -> np.ndarray:
        """Codes of the scan ids ``local`` (-1: missing, coded as ""), each distinct value
        coded at its first row, as Codes.encode codes a batch's values."""
        lut = self.luts.get(id(codes))
        if lut is None:
            lut = self.luts[id(codes)] = np.full(len(values) + 1, -1, dtype=np.int32)
        shifted = local.astype(np.int64) + 1
        new = lut[shifted] < 0
        if new.any():  # in order of first appearance (pandas' hash: ~5x numpy's sort)
            for j in pd.unique(shifted[new]).tolist():
                lut[j] = codes._code("" if j == 0 else text(values[j - 1]))
        return lut[shifted] if len(shifted) else np.empty(0, np.int32)

    def _ids(self, numbers: np.ndarray, text_ids: np.ndarray) -> np.ndarray:
        """pid / tid as columns.ids_to_int reads them: ints as they are, text by stable_id."""
        texts = text_ids >= 0
        if not texts.any():
            return numbers
        out = numbers.copy()
        uniq, inverse = np.unique(text_ids[texts], return_inverse=True)
        mapped = np.array([stable_id(self.scan.strings[j]) for j in uniq.tolist()],
                          dtype=np.int64)
        out[texts] = mapped[inverse]
        return out


def _arg_columns() -> tuple:
    from profkit.trace.accumulate import _ARG_COLUMNS

    columns = {attr: column for column, attr, _ in _ARG_COLUMNS}
    return tuple(columns[f] for f in ARG_FIELDS)
