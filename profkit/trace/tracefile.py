"""Reading one Kineto (PyTorch profiler) trace file into typed records.

The decoder is msgspec with typed structs: it skips every argument profkit does not use
and builds no dict per event, which measured ~2.3x faster than ``orjson.loads`` on the same
bytes (see BENCHMARKS.md). Events are first split into raw JSON slices and decoded in
batches, so memory stays near the file's size. A file that cannot be read becomes a
:class:`TraceError` naming the file and what is wrong. Bad values inside a readable file cost
only themselves: invalid UTF-8 is replaced, nesting deeper than any trace has is cut, and a
batch the typed decoder refuses is decoded event by event, dropping or emptying what does not
fit (counted in :attr:`Trace.problems`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec

from profkit.errors import TraceError
from profkit.trace import jsonrepair
from profkit.trace import native as native_reader
from profkit.trace.readlimit import read_trace_bytes, trace_pieces
from profkit.trace.traceevents import BATCH_DECODER, DECODE_ERRORS, decode_lenient
from profkit.validate import Problems


class Header(msgspec.Struct, gc=False):
    """The top-level keys of a trace that profkit reads (all but the events)."""

    schemaVersion: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    displayTimeUnit: Any = None
    trace_id: Any = None
    host_name: Any = None
    hostname: Any = None
    profkit_run_id: Any = None
    profkit: Any = None  # the summary profkit merge writes into its output (not a rank's trace)


_ABSENT = msgspec.field(default_factory=msgspec.Raw)  # an empty Raw: the key is absent


class _RawDoc(msgspec.Struct, gc=False):
    """The document with its header values left raw: one of them out of the decoder's range
    (1e400) must cost that value, not the file."""

    schemaVersion: msgspec.Raw = _ABSENT
    distributedInfo: msgspec.Raw = _ABSENT
    deviceProperties: msgspec.Raw = _ABSENT
    baseTimeNanoseconds: msgspec.Raw = _ABSENT
    displayTimeUnit: msgspec.Raw = _ABSENT
    trace_id: msgspec.Raw = _ABSENT
    host_name: msgspec.Raw = _ABSENT
    hostname: msgspec.Raw = _ABSENT
    profkit_run_id: msgspec.Raw = _ABSENT
    profkit: msgspec.Raw = _ABSENT  # merge's mark on its own output
    traceEvents: list[msgspec.Raw] | None = None


_RAW_DECODER = msgspec.json.Decoder(Union[_RawDoc, list[msgspec.Raw]])
STREAM_SPLIT_MIN_BYTES = 256 << 20  # load_split streams files of more JSON than this
BATCH_EVENTS = 10_000  # peak memory of a 75 MB rank: 406 MB at 100k, 265 MB at 10k; no slower


@dataclass
class Trace:
    """A trace whose events are still raw JSON slices, decoded batch by batch so that no
    more than one batch of decoded events is alive at a time (memory stays near the size
    of the file, not several times it)."""

    path: str
    header: Header
    raw_events: list[msgspec.Raw]
    _bytes: bytes = field(repr=False, default=b"")  # the buffer the slices point into
    problems: Problems = field(default_factory=Problems)  # repairs of the file as a whole
    repairs: Counter = field(default_factory=Counter)  # per-event repairs, by field
    native: native_reader.NativeScan | None = None  # the native reader's columns (raw_events empty)
    split: Callable[[], Iterator[tuple]] | None = None  # load_split: the events, streamed

    def __post_init__(self) -> None:
        self.count = len(self.raw_events) if self.native is None else self.native.count

    def __len__(self) -> int:
        """Events in the trace (still known after :meth:`release`)."""
        return self.count

    def release(self) -> None:
        """Drop the raw JSON; the trace cannot be decoded again after this."""
        self.raw_events = []
        self._bytes = b""
        self.native = None

    def raw_chunks(self, size: int = BATCH_EVENTS) -> Iterator[list[msgspec.Raw]]:
        """The events' raw JSON, at most ``size`` events at a time (of a trace the native
        reader scanned, whose JSON it did not keep: the file read again, split in Python)."""
        if self.native is not None and not self.raw_events:
            again = load(self.path, columns=False)
            self.raw_events, self._bytes = again.raw_events, again._bytes
        if self.split is not None:
            yield from _split_chunks(self.path, self.split(), size)
            return
        for i in range(0, len(self.raw_events), size):
            yield self.raw_events[i:i + size]

    def batches(self, size: int = BATCH_EVENTS) -> Iterator[list]:
        """The events decoded, one batch at a time. A batch the typed decoder refuses is
        decoded event by event (:func:`decode_lenient`), its repairs counted in ``repairs``."""
        for chunk in self.raw_chunks(size):
            try:
                yield BATCH_DECODER.decode(json_array(chunk))
            except DECODE_ERRORS:
                yield decode_lenient(chunk, self.repairs)

    def all_problems(self) -> Problems:
        """What was repaired in the file and in its events (complete once it is decoded)."""
        out = Problems(self.problems)
        dropped = self.repairs.get("dropped", 0)
        if dropped:
            out.append(f"{dropped} events dropped (not a JSON object, or ph not text)")
        fields = ", ".join(f"{k} ({n})" for k, n in sorted(self.repairs.items())
                           if k != "dropped")
        if fields:
            out.append(f"values of the wrong type ignored in events: {fields}")
        return out

    def events(self) -> list:
        """Every event, decoded (for small traces and tests)."""
        return [ev for batch in self.batches() for ev in batch]


def _split_chunks(path: str, windows: Iterator[tuple], size: int) -> Iterator[list[msgspec.Raw]]:
    """The native reader's split of the events, window by window, as lists of ``size``."""
    chunk: list[msgspec.Raw] = []
    try:
        for kept, starts, ends in windows:
            view = memoryview(kept)
            for s, e in zip(starts.tolist(), ends.tolist()):
                chunk.append(msgspec.Raw(view[s:e]))
                if len(chunk) == size:
                    yield chunk
                    chunk = []
    except native_reader.Declined:  # it read the file once already: it changed since
        raise TraceError(path, "changed while it was read") from None
    if chunk:
        yield chunk


def json_array(chunk: list[msgspec.Raw]) -> bytes:
    """The events as one JSON array, made in one copy: the brackets go onto the first and
    last slice, not around the joined bytes (two more copies of the batch, measured as ~6%
    of a large rank's read)."""
    if not chunk:
        return b"[]"
    parts = list(chunk)
    parts[0] = b"[" + parts[0]
    parts[-1] = bytes(parts[-1]) + b"]"
    return b",".join(parts)


def _header_value(raw: msgspec.Raw, key: str, problems: Problems) -> Any:
    if not len(raw):
        return None
    try:
        return msgspec.json.decode(raw)
    except DECODE_ERRORS:
        pass
    try:
        return json.loads(bytes(raw))
    except (ValueError, RecursionError):
        problems.bad(key, bytes(raw)[:20].decode(errors="replace"), "cannot be read (ignored)")
        return None


def _split(path: str, raw: bytes, problems: Problems):
    """The document split into raw header values and raw events; nesting deeper than any
    trace has is cut and the split retried once."""
    for attempt in range(2):
        try:
            return _RAW_DECODER.decode(raw), raw
        except RecursionError:
            if attempt:
                break
            raw, cut = jsonrepair.cut_deep_nesting(raw)
            problems.append(f"{cut} values nested deeper than {jsonrepair.MAX_JSON_DEPTH} "
                            "levels replaced by 0")
        except msgspec.ValidationError as exc:
            raise TraceError(path, f"JSON but not a trace ({exc})") from None
        except msgspec.DecodeError as exc:
            raise TraceError(path, _json_problem(raw, exc)) from None
    raise TraceError(path, "JSON nested too deeply to read")


def decode(path: str | Path, raw: bytes, columns: bool = True) -> Trace:
    """Split trace JSON bytes into header and raw events (``columns``: or scan the events
    into columns with the native reader, where it is built); raise :class:`TraceError` for
    anything that is not a trace."""
    path = str(path)
    scanned = native_reader.scan(raw) if columns else None
    if scanned is not None:
        return _scanned(path, scanned)
    problems = Problems()
    if not jsonrepair.is_valid_utf8(raw):
        raw = jsonrepair.repair_utf8(raw)
        problems.append("invalid UTF-8 bytes replaced by U+FFFD")
    doc, raw = _split(path, raw, problems)
    if isinstance(doc, list):
        return Trace(path, Header(), doc, raw, problems)
    if doc.traceEvents is None:
        raise TraceError(path, "JSON but not a trace: no traceEvents list")
    return Trace(path, _header(doc, problems), doc.traceEvents, raw, problems)


def _scanned(path: str, scanned: native_reader.NativeScan) -> Trace:
    """The trace the native reader scanned: its header split in Python from the document
    around the events (strict JSON and valid UTF-8, or the scanner had declined it)."""
    problems = Problems()
    if scanned.head is None:
        return Trace(path, Header(), [], b"", problems, native=scanned)
    doc, _ = _split(path, scanned.head, problems)
    return Trace(path, _header(doc, problems), [], b"", problems, native=scanned)


def _header(doc: _RawDoc, problems: Problems) -> Header:
    return Header(**{f: _header_value(getattr(doc, f), f, problems)
                     for f in Header.__struct_fields__})


def _json_problem(raw: bytes, exc: Exception) -> str:
    head = raw.lstrip()[:1]
    if head not in (b"{", b"["):
        return "not JSON (does not start with '{' or '[')"
    if "truncated" in str(exc).lower():
        return "truncated JSON (the file ends early; was the profiler interrupted?)"
    return f"not valid JSON ({exc})"


def load(path: str | Path, readers: int = 1, columns: bool = True) -> Trace:
    """Read one trace file and split it into header and raw events (``readers``: traces
    read at once, sharing one memory budget: profkit.trace.readlimit; ``columns``: scanned
    into columns by the native reader where it is built, for profkit.trace.accumulate, as
    the file is read or gunzipped, so that its JSON is never held whole). A file the
    native reader declines is read again, whole, by the Python reader."""
    if columns and native_reader.available():
        pieces = trace_pieces(path, readers)
        try:
            scanned = native_reader.scan_pieces(pieces)
        finally:
            pieces.close()
        if scanned is not None:
            return _scanned(str(path), scanned)
    return decode(path, read_trace_bytes(path, readers), columns=False)


def load_split(path: str | Path, readers: int = 1) -> Trace:
    """Read one trace file's header, its events left raw to be read in order, once, with
    :meth:`Trace.raw_chunks` (profkit merge). Where the native reader is built and the
    file's JSON is large (:data:`STREAM_SPLIT_MIN_BYTES`), the file is checked by the
    scanner first (nothing kept but the document around the events, for the header), then
    its events are split as it is read again: neither pass holds its JSON whole (merge of
    2 x 75 MB: peak 339 -> 271 MiB), at the cost of the two passes (+0.2 CPU s per 75 MB
    against msgspec's split of the whole, which is why smaller files keep that). The check
    first makes a file all or nothing, as the whole split does: a file broken at its end
    gives no events, not some. Else, or where the scanner declines it, :func:`load`
    without columns."""
    if native_reader.available() and _json_bytes_guess(path) >= STREAM_SPLIT_MIN_BYTES:
        pieces = trace_pieces(path, readers)
        try:
            checked = native_reader.scan_pieces(pieces, native_reader.CHECK)
        finally:
            pieces.close()
        if checked is not None:
            trace = _scanned(str(path), checked)
            trace.native = None
            trace.split = lambda: native_reader.split_pieces(trace_pieces(path, readers))
            return trace
    return load(path, readers, columns=False)


def _json_bytes_guess(path: str | Path) -> int:
    """The file's JSON bytes: its size, or 12x that for gzip (what Kineto traces compress
    by); 0 when it cannot be read (the read then names the problem)."""
    try:
        with open(path, "rb", buffering=0) as fh:
            gz = fh.read(2) == b"\x1f\x8b"
            return os.fstat(fh.fileno()).st_size * (12 if gz else 1)
    except OSError:
        return 0
