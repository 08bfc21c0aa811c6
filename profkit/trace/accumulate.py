"""Building the event columns of one trace batch by batch.

Each batch of decoded events is reduced to numpy arrays and integer codes at once and then
dropped, so the decoded events of the whole trace are never alive together. Names and
categories are coded against trace-wide dictionaries; the few events carrying collective
arguments keep their decoded args for the collectives table.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter, itemgetter

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify import events as classify
from profkit.classify.flops import MAX_OP_FLOPS, PRECISIONS, ConvLinks
from profkit.classify.opfamilies import op_family
from profkit.columns import INT64_SAFE, ids_to_int, to_float, to_int, us_to_ns, values_in
from profkit.trace import nativefeed
from profkit.trace.countersamples import CounterSamples
from profkit.trace.memorysamples import MemorySamples
from profkit.trace.opargs import dims_raw, dims_text, shape_costs
from profkit.trace.traceevents import Args, CounterEvent, Event, InstantEvent, Meta, without_raw
from profkit.trace.tracefile import Trace
from profkit.validate import MAX_ABS_NS, MAX_NAME_CHARS, cap_name

EMPTY_ARGS = Args()
_TS = attrgetter("ts")
_FIELDS = tuple(map(attrgetter, ("dur", "name", "cat", "pid", "tid", "args")))
_COLL = attrgetter("collective", "in_nelems")  # set on the rows the collectives table reads
_NO_COLL = (None, None)
_KIND_CODE = {k: i for i, k in enumerate(S.KINDS)}
MAX_DUR_US = 86_400e6  # one day: longer is no profiled event; clipped to this
MAX_MEMO = 200_000  # distinct (op, shapes) costs remembered per trace before starting over


class SparseArgs(dict):
    """Row -> decoded args, for the rows that carry collective arguments; empty otherwise."""

    def __missing__(self, row: int) -> Args:
        return EMPTY_ARGS


class Codes:
    """Trace-wide dictionary coding of string values (None and non-strings as text)."""

    def __init__(self, cap: bool = False) -> None:
        self.index: dict[str, int] = {}
        self.limit = MAX_NAME_CHARS if cap else None  # longer values are cut (validate.cap_name)
        self.capped = 0  # distinct values cut

    def encode(self, values: list, text=str) -> np.ndarray:
        """Codes of ``values``; each distinct value is made text by ``text`` once, a missing
        one (None, which ``pd.factorize`` gives back as NaN) is ""."""
        codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=False)
        lut = np.array([self._code("" if _missing(u) else text(u)) for u in uniques],
                       dtype=np.int32)
        return lut[codes] if len(codes) else np.empty(0, np.int32)

    def _code(self, text: str) -> int:
        if self.limit is not None and len(text) > self.limit:
            text = cap_name(text)
            self.capped += text not in self.index
        return self.index.setdefault(text, len(self.index))

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=pd.Index(list(self.index), dtype=str))


# (column, Args attribute, the kinds it is read for: None means every event)
_ARG_COLUMNS = (
    (S.CORRELATION, "correlation", None),
    (S.EXTERNAL_ID, "external_id", None),
    ("stream_arg", "stream", S.GPU_KINDS),
    ("device_arg", "device", S.GPU_KINDS),
    (S.BLOCKS_PER_SM, "blocks_per_sm", (S.KIND_KERNEL,)),
    (S.OCCUPANCY_PCT, "occupancy_pct", (S.KIND_KERNEL,)),
    (S.FLOPS, "flops", (S.KIND_CPU_OP,)),
    (S.BYTES, "bytes", (S.KIND_MEMCPY, S.KIND_MEMSET)),
)


class Accumulator:
    """Collects the complete ('X') events of a trace, batch by batch, its counter ('C')
    samples (``counters``) and its allocator's ``[memory]`` instants (``memory``)."""

    def __init__(self, base_ns: int = 0) -> None:
        self.base_ns = base_ns
        # Relative ts (us) that place an event within +-MAX_ABS_NS epoch ns; others are dropped.
        self.ts_range_us = ((-MAX_ABS_NS - base_ns) / 1000, (MAX_ABS_NS - base_ns) / 1000)
        self.dropped_ts = self.bad_dur = self.oversized_ids = self.dropped_flops = 0
        self.dropped_costs = 0  # ops whose shapes no byte formula could read
        # names and categories are cut (regexes read them); input shapes are kept whole
        self.names, self.cats, self.dims = Codes(cap=True), Codes(cap=True), Codes()
        self.cat_kind: list[str] = []  # kind of each category code
        self.cat_kind_code: list[int] = []  # the same as a code (index in _KIND_CODE)
        self.name_wanted: list[bool] = []  # per name code: costs from shapes (_wanted_names)
        self.memo: dict[tuple, tuple] = {}  # (name, raw shapes) -> what shape_costs found
        self.parts: dict[str, list[np.ndarray]] = {}
        self.coll_args = SparseArgs()
        self.metadata: list[Meta] = []
        self.counters = CounterSamples(self.ts_range_us)  # the trace's 'C' events
        self.memory = MemorySamples(self.ts_range_us)  # its 'i' events named [memory]
        self.conv_links = ConvLinks()
        self.rows = 0

    def add(self, batch: list) -> None:
        self.metadata.extend(e for e in batch if type(e) is Meta)
        self.counters.add([e for e in batch if type(e) is CounterEvent])
        self.memory.add([e for e in batch if type(e) is InstantEvent])
        xs = [e for e in batch if type(e) is Event]
        ts_us = to_float(list(map(_TS, xs)))
        placed = (ts_us >= self.ts_range_us[0]) & (ts_us <= self.ts_range_us[1])  # False for NaN
        if not placed.all():  # events without a time on the int64 ns clock cannot be placed
            self.dropped_ts += int(len(xs) - placed.sum())
            xs = [e for e, ok in zip(xs, placed) if ok]
            ts_us = ts_us[placed]
        # Each field in a C-level map (zip(*...) of per-event tuples measured 10x slower).
        dur, name, cat, pid, tid, args = (list(map(get, xs)) for get in _FIELDS)
        cat = classify.legacy_categories(cat, pid)  # a pre-Kineto export has no "cat"
        cat_codes = self.cats.encode(cat)
        name_codes = self.names.encode(name)
        self._extend_kinds()
        kind = np.asarray(self.cat_kind_code, dtype=np.int8)[cat_codes]
        args = [a or EMPTY_ARGS for a in args]
        self._put("ts_us", ts_us)
        self._put(S.DUR_NS, self._dur_ns(to_float(dur)))
        self._put(S.NAME, name_codes)
        self._put(S.CAT, cat_codes)
        for column, ids in ((S.PID, pid), (S.TID, tid)):
            values, oversized = ids_to_int(ids)
            self._put(column, values)
            self.oversized_ids += oversized
        rows_of: dict = {}  # the rows of each kinds tuple, and their args
        for column, attr, kinds in _ARG_COLUMNS:
            values = _read_arg(args, kind, attr, kinds, rows_of)
            if column == S.FLOPS:
                self._add_shape_costs(values, name_codes, name, args)
            self._put(column, values)
        cpu_ops = _of_kinds(args, kind, (S.KIND_CPU_OP,), rows_of)
        self._put(S.INPUT_DIMS, self.dims.encode(dims_raw(len(args), *cpu_ops), dims_text))
        has_coll = np.fromiter(map(_NO_COLL.__ne__, map(_COLL, args)), bool, len(args))
        for i in np.flatnonzero(has_coll).tolist():
            self.coll_args[self.rows + i] = without_raw(args[i])
        self.rows += len(xs)

    def _add_shape_costs(self, flops: np.ndarray, name_codes: np.ndarray, names: list,
                         args: list[Args], shape_hits=None) -> None:
        """FLOPs of matmul / conv / attention ops from their shapes where the trace has
        none, the bytes and vector FLOPs of every op with a cost formula, and the precision
        of their inputs (profkit.classify.flops, profkit.classify.traffic). One op's costs
        are worked out once per distinct set of shapes (memo). ``shape_hits``: how the rows
        and their costs are found (:meth:`_shape_hits`, or the native reader's)."""
        n = len(names)
        precision = np.zeros(n, dtype=np.int8)  # 0: unknown, else 1 + PRECISIONS index
        costs = np.full((3, n), np.nan, dtype=np.float32)  # read, write, vector FLOPs
        # the trace's own counts: one no op can have (inf, negative, 1e308) is dropped
        absurd = ~np.isnan(flops) & ~((flops >= 0) & (flops <= MAX_OP_FLOPS))
        flops[absurd] = np.nan
        self.dropped_flops += int(absurd.sum())
        rows, hits, of_row = (shape_hits or self._shape_hits)(name_codes, names, args)
        if rows:  # each distinct hit read once, then taken for its rows (of_row)
            at = np.array(rows, dtype=np.int64)
            fill = np.isnan(flops[at])  # the trace's own count wins over the shapes'
            shape_value = np.fromiter(map(itemgetter(0), hits), np.float64, len(hits))[of_row]
            flops[at[fill]] = shape_value[fill]
            dropped = np.fromiter(map(itemgetter(1), hits), bool, len(hits))[of_row]
            self.dropped_flops += int(np.count_nonzero(dropped & fill))
            self.dropped_costs += int(np.count_nonzero(
                np.fromiter(map(itemgetter(6), hits), bool, len(hits))[of_row]))
            costs[:, at] = np.fromiter(chain.from_iterable(map(itemgetter(2), hits)), np.float32,
                                       3 * len(hits)).reshape(-1, 3).T[:, of_row]
            precision[at] = np.fromiter(map(itemgetter(3), hits), np.int8, len(hits))[of_row]
            linked = np.fromiter((hit[4] is not None for hit in hits), bool, len(hits))
            for k in np.flatnonzero(linked[of_row]).tolist():
                i, hit = rows[k], hits[of_row[k]]
                self.conv_links.note(self.rows + i, names[i], hit[4], hit[5],
                                     args[i].seq_number, flops[i])
        self._put(S.FLOPS_DTYPE, precision)
        for column, values in zip(S.COST_COLUMNS, costs):
            self._put(column, values)

    def _shape_hits(self, name_codes: np.ndarray, names: list, args: list[Args]) -> tuple:
        """(rows, what :func:`.opargs.shape_costs` found, the position in it of each row's)
        of the ops with a cost formula and Input Dims."""
        # Only the rows of wanted names are looked at (decided once per name, not per event);
        # what each row's shapes give is written into the columns afterwards, all at once.
        rows, hits = [], []
        memo = self.memo
        for i in np.flatnonzero(self._wanted_names()[name_codes]).tolist():
            a = args[i]
            if not len(a.input_dims):
                continue
            key = (names[i], bytes(a.input_dims), bytes(a.input_types), bytes(a.concrete_inputs),
                   bytes(a.input_strides))
            hit = memo.get(key)
            if hit is None:
                if len(memo) >= MAX_MEMO:
                    memo.clear()
                hit = memo[key] = shape_costs(names[i], a, self.conv_links.links(names[i]))
            rows.append(i)
            hits.append(hit)
        return rows, hits, np.arange(len(hits))

    def _wanted_names(self) -> np.ndarray:
        """Per name code: whether the name has a FLOP or cost formula or a conv link."""
        new = list(self.names.index)[len(self.name_wanted):]
        self.name_wanted.extend(bool(n) and (self.conv_links.wants(n) or bool(op_family(n)))
                                for n in new)
        return np.asarray(self.name_wanted, dtype=bool)

    def resolve_conv_links(self) -> None:
        """FLOPs that needed a later event (profkit.classify.flops.ConvLinks), on the
        unsorted rows; once every batch is added, before :meth:`frame`."""
        flops = self._take(S.FLOPS)
        ts_us = np.concatenate(self.parts.get("ts_us", [np.empty(0)]))
        end_us = ts_us + np.concatenate(self.parts.get(S.DUR_NS, [np.empty(0)])) / 1000
        tid = np.concatenate(self.parts.get(S.TID, [np.empty(0, np.int64)]))
        self.conv_links.resolve(flops, ts_us, end_us, tid)
        self.parts[S.FLOPS] = [flops]

    def _dur_ns(self, dur_us: np.ndarray) -> np.ndarray:
        """Durations in ns: missing or negative ones are 0, longer than a day clipped (counted)."""
        sane = (dur_us >= 0) & (dur_us <= MAX_DUR_US)  # False for NaN
        if not sane.all():
            self.bad_dur += int(len(dur_us) - sane.sum())
            dur_us = np.clip(np.nan_to_num(dur_us, nan=0.0), 0, MAX_DUR_US)
        return np.rint(dur_us * 1000)

    def problems(self) -> list[str]:
        """What :meth:`add` dropped or repaired, one phrase each."""
        out = []
        if self.dropped_ts:
            out.append(f"{self.dropped_ts} events dropped: ts missing or outside the epoch-ns range")
        if self.bad_dur:
            out.append(f"{self.bad_dur} events with dur missing, negative or over a day "
                       "(set to 0 or clipped to a day)")
        if self.oversized_ids:
            out.append(f"{self.oversized_ids} pid/tid values beyond int64 (read as stable ids)")
        capped = self.names.capped + self.cats.capped
        if capped:
            out.append(f"{capped} event names or categories longer than {MAX_NAME_CHARS:,} "
                       "characters cut to their start and a hash")
        dropped_flops = self.dropped_flops + self.conv_links.dropped
        if dropped_flops:
            out.append(f"FLOPs of {dropped_flops} ops dropped: their shapes or counts give no "
                       "count an op can have (e.g. 2**62-sized dimensions)")
        if self.dropped_costs:
            out.append(f"bytes and vector FLOPs of {self.dropped_costs} ops dropped: their Input Dims "
                       "are no shapes a cost formula can read (e.g. 33 dimensions, text)")
        return out + self.counters.problems() + self.memory.problems()

    def _extend_kinds(self) -> None:
        new = list(self.cats.index)[len(self.cat_kind):]
        kinds = classify.kinds_for_categories(np.array(new, dtype=object))
        self.cat_kind.extend(kinds)
        self.cat_kind_code.extend(_KIND_CODE[k] for k in kinds)

    def _put(self, column: str, values: np.ndarray) -> None:
        self.parts.setdefault(column, []).append(values)

    def frame(self) -> pd.DataFrame:
        """The events table, sorted by start time (ts on the epoch clock; stream and device
        set on GPU rows). Consumes the collected parts; ``coll_args`` is re-keyed to the
        sorted rows."""
        ts_us = self._take("ts_us")
        order = np.argsort(ts_us, kind="stable")
        self._rekey_args(order)
        cats = self.cats.categorical(self._take(S.CAT, order).astype(np.int32, copy=False))
        # each category's kind code (-1, no category: other), mapped through the codes: no
        # string per row to look up (~15 ms of a 200k-event rank)
        kind_of_cat = np.asarray(self.cat_kind_code + [_KIND_CODE[S.KIND_OTHER]], dtype=np.int8)
        ev = pd.DataFrame({
            S.TS_NS: self.base_ns + us_to_ns(ts_us[order]),
            S.DUR_NS: self._take(S.DUR_NS, order).astype(np.int64),
            S.NAME: self.names.categorical(self._take(S.NAME, order).astype(np.int32, copy=False)),
            S.CAT: cats,
            S.KIND: pd.Categorical.from_codes(kind_of_cat[cats.codes], categories=S.KINDS),
        })
        for name in (S.PID, S.TID):
            ev[name] = self._take(name, order).astype(np.int64, copy=False)
        for name in (S.CORRELATION, S.EXTERNAL_ID):
            ev[name] = to_int(self._take(name, order))
        is_gpu = values_in(ev[S.KIND], S.GPU_KINDS)
        for name, arg, fallback in ((S.STREAM, "stream_arg", S.TID), (S.DEVICE, "device_arg", S.PID)):
            values = self._take(arg, order)
            ok = np.abs(values) <= INT64_SAFE  # False for NaN: absent, or no id
            ids = np.where(ok, np.where(ok, values, 0).astype(np.int64), ev[fallback].to_numpy())
            ev[name] = np.where(is_gpu, ids, -1).astype(np.int64)
        for name in (S.BLOCKS_PER_SM, S.OCCUPANCY_PCT, S.FLOPS, S.BYTES):
            ev[name] = self._take(name, order)
        ev[S.FLOPS_DTYPE] = pd.Categorical.from_codes(
            self._take(S.FLOPS_DTYPE, order).astype(np.int8, copy=False), categories=("",) + PRECISIONS)
        ev[S.INPUT_DIMS] = self.dims.categorical(
            self._take(S.INPUT_DIMS, order).astype(np.int32, copy=False))
        for name in S.COST_COLUMNS:
            ev[name] = self._take(name, order).astype(np.float32, copy=False)
        return ev

    def _take(self, column: str, order: np.ndarray | None = None) -> np.ndarray:
        """One collected column, concatenated (and reordered), its parts released."""
        parts = self.parts.pop(column, [])
        # one part (the native reader's one add) is taken as it is: no copy to concatenate
        values = parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0)
        del parts
        return values if order is None else values[order]

    def _rekey_args(self, order: np.ndarray) -> None:
        new_row = np.empty(len(order), dtype=np.int64)
        new_row[order] = np.arange(len(order))
        self.coll_args = SparseArgs({int(new_row[i]): a for i, a in self.coll_args.items()})


def _read_arg(args: list[Args], kind: np.ndarray, attr: str, kinds: tuple | None,
              rows_of: dict) -> np.ndarray:
    """float64 column of one arg, read on the rows of ``kinds`` (every row if None; NaN
    elsewhere). ``rows_of``: the batch's rows and args of each kinds tuple, found once."""
    get = attrgetter(attr)
    if kinds is None:
        return to_float(list(map(get, args)))
    rows, chosen = _of_kinds(args, kind, kinds, rows_of)
    out = np.full(len(args), np.nan)
    if len(rows):
        out[rows] = to_float(list(map(get, chosen)))
    return out


def _of_kinds(args: list[Args], kind: np.ndarray, kinds: tuple, rows_of: dict) -> tuple:
    """(rows, their args) of the batch's events of ``kinds``, found once per batch
    (``rows_of``) for every column read on them."""
    if kinds not in rows_of:
        wanted = np.zeros(len(S.KINDS), dtype=bool)
        wanted[[_KIND_CODE[k] for k in kinds]] = True
        rows = np.flatnonzero(wanted[kind])
        rows_of[kinds] = rows, list(map(args.__getitem__, rows.tolist()))
    return rows_of[kinds]


def _missing(value) -> bool:
    """None, or the NaN ``pd.factorize`` makes of it."""
    return value is None or (isinstance(value, float) and value != value)


def accumulate(trace: Trace, base_ns: int = 0) -> Accumulator:
    """Every batch of the trace collected (relative times on ``base_ns``); the trace's raw
    buffers are released after and what was dropped or repaired added to its problems."""
    acc = Accumulator(base_ns)
    if trace.native is not None:  # the native reader's columns (profkit.trace.native)
        nativefeed.feed(acc, trace.native, trace.repairs)
    for batch in trace.batches() if trace.native is None else ():
        acc.add(batch)
    trace.release()
    acc.resolve_conv_links()
    trace.problems.extend(acc.problems())
    return acc
