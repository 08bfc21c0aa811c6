"""The native Kineto reader (C, native/kineto/), when it is built, and its result as numpy
columns.

:func:`scan_pieces` reads a trace's bytes once, piece by piece as they are read or
gunzipped (no piece is kept once read: a rank's memory never holds its whole JSON), and
gives the columns of its plain complete events and allocator samples (no Python object per
event) and the bytes of every other event, which the Python reader decodes as it always did
(profkit.trace.nativefeed); :func:`scan` does the same for bytes in memory. Where the
extension was not built or cannot be imported, they return None and profkit reads every
trace in pure Python, saying so once. ``PROFKIT_PURE_PYTHON=1`` asks for the pure-Python
reader (the oracle of the identity tests, tests/test_native_reader.py).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

# The numeric args of the columns arg0.. (native/kineto/event.c ARG_KEYS), as Args fields, and
# the raw JSON args of raw0.. (the next ones of ARG_KEYS).
ARG_FIELDS = ("correlation", "external_id", "stream", "device", "blocks_per_sm",
              "occupancy_pct", "flops", "bytes")
RAW_FIELDS = ("input_dims", "input_types", "input_strides", "concrete_inputs")
COLUMNS, SPLIT, CHECK = 0, 1, 2  # what a scan keeps (native/kineto/scan.h SCAN_COLUMNS ..)
NO_SEQ = np.iinfo(np.int64).min  # column seq: no "Sequence number" (absent or null)
FEED_BYTES = 4 << 20  # the least JSON handed to the scanner at a time (a pieces' window)
_DTYPES = {"index": np.int64, "ts": np.float64, "dur": np.float64, "name": np.int32,
           "cat": np.int32, "pid": np.int64, "tid": np.int64, "pid_text": np.int32,
           "tid_text": np.int32, "coll": np.bool_, "seq": np.int64,
           **{f"arg{i}": np.float64 for i in range(len(ARG_FIELDS))},
           **{f"raw{i}": np.int32 for i in range(len(RAW_FIELDS))}}
# the allocator's samples (scan.h M_*): one row per plain [memory] / [OutOfMemory] instant
_MEMORY_DTYPES = {"index": np.int64, "ts": np.float64, "tid": np.int64, "tid_text": np.int32,
                  "oom": np.bool_, "bytes": np.int64, "allocated": np.int64,
                  "reserved": np.int64, "device": np.int64, "device_type": np.int64,
                  "addr": np.int64}
_NOTED = []  # the one line saying that the native reader is missing, once per process
# ... and once per command: set once said, so that the pool's workers (started later, with
# this environment) say nothing more
_NOTED_ENV = "PROFKIT_NATIVE_NOTED"


def _module():
    if os.environ.get("PROFKIT_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from profkit import _kineto
    except ImportError as exc:
        if not _NOTED and not os.environ.get(_NOTED_ENV):
            _NOTED.append(True)
            os.environ[_NOTED_ENV] = "1"
            log.warning("the native trace reader is not built (%s); reading traces "
                        "in pure Python (slower, same results)", exc)
        return None
    return _kineto


def available() -> bool:
    """Whether traces are read by the native reader."""
    return _module() is not None


@dataclass
class NativeScan:
    """What the native reader found in one trace's bytes."""

    count: int  # elements of traceEvents
    head: bytes | None  # the document with its traceEvents emptied ("[]"); None: the root is it
    columns: dict[str, np.ndarray]  # the fast events' columns (file order)
    memory: dict[str, np.ndarray]  # the allocator samples' columns (file order)
    strings: list[str]  # distinct names, categories and text ids (columns name, cat, *_text)
    raw: list[bytes]  # distinct raw JSON of the args in RAW_FIELDS (columns raw0..)
    other: dict[str, np.ndarray]  # index, start, end (in kept) of the events left to Python
    coll: dict[str, np.ndarray]  # start, end (in kept) of each fast row with column coll set
    kept: bytearray  # the bytes of those events

    def __len__(self) -> int:
        return len(self.columns["index"])


def scan(raw: bytes | bytearray) -> NativeScan | None:
    """The native reader's scan of trace JSON bytes; None when it is not built, or when it
    leaves the file to the Python reader (not strict JSON or not valid UTF-8, nesting deeper
    than 64 levels, surrogate escapes, no traceEvents list: what the Python reader repairs
    or names)."""
    mod = _module()
    if mod is None:
        return None
    return _result(mod.scan(raw))


def scan_pieces(pieces: Iterable[bytes | bytearray], mode: int = COLUMNS) -> NativeScan | None:
    """:func:`scan` of the document the ``pieces`` make, read as they come: the scanner is
    handed at least :data:`FEED_BYTES` at a time and keeps nothing of them, so only the
    part of an element cut by a piece's end is held over (a value too long for the window
    is retried once the window has doubled, so that no byte is scanned more than ~twice).
    ``mode`` CHECK: nothing of the events is kept (the scan says whether the scanner reads
    the file, and gives its head and count)."""
    mod = _module()
    if mod is None:
        return None
    state = mod.scanner(mode)
    try:
        for _ in _feed(mod, state, pieces):
            pass
    except Declined:
        return None
    return _result(mod.result(state))


class Declined(Exception):
    """The scanner left the file to the Python reader."""


def split_pieces(pieces: Iterable[bytes | bytearray]) -> Iterator[tuple]:
    """The elements of traceEvents of the document the ``pieces`` make, as they are read:
    (bytes, starts, ends) per window, each element's JSON at bytes[starts[i]:ends[i]], in
    file order; raises :class:`Declined` where the scanner declines the file (after
    elements were given: check it first, with :func:`scan_pieces` and CHECK)."""
    mod = _module()
    if mod is None:
        raise Declined("the native reader is not built")
    state = mod.scanner(SPLIT)
    for _ in _feed(mod, state, pieces):
        kept, starts, ends = mod.drain(state)
        if starts:
            yield (kept, np.frombuffer(starts, dtype=np.int64),
                   np.frombuffer(ends, dtype=np.int64))


def _feed(mod, state, pieces: Iterable[bytes | bytearray]) -> Iterator[None]:
    """Feed the pieces to the scanner (one step per feed); raises :class:`Declined`."""
    window = bytearray()
    want = FEED_BYTES
    for piece in pieces:
        window += piece
        if len(window) < want:
            continue
        used = mod.feed(state, window, False)
        if used is None:
            raise Declined
        yield
        want = max(FEED_BYTES, 2 * len(window)) if used == 0 else FEED_BYTES
        del window[:used]
    if mod.feed(state, window, True) is None:
        raise Declined
    yield


def _result(found: dict | None) -> NativeScan | None:
    if found is None:
        return None
    columns = {k: np.frombuffer(v, dtype=_DTYPES[k]) for k, v in found["columns"].items()}
    memory = {k: np.frombuffer(v, dtype=_MEMORY_DTYPES[k]) for k, v in found["memory"].items()}
    other = {k: np.frombuffer(v, dtype=np.int64) for k, v in found["other"].items()}
    coll = {k: np.frombuffer(v, dtype=np.int64) for k, v in found["coll"].items()}
    return NativeScan(found["count"], None if found["root_array"] else found["head"], columns,
                      memory, found["strings"], found["raw"], other, coll, found["kept"])


def join_spans(raw: bytes | bytearray, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """The byte spans of ``raw`` as one JSON array (one copy, in C)."""
    from profkit import _kineto

    return _kineto.join(raw, np.ascontiguousarray(starts, np.int64),
                          np.ascontiguousarray(ends, np.int64))


_module()  # said at import, in the command's own process, when the reader is missing
