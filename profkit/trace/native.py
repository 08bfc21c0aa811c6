"""The native Kineto reader (C, native/kineto/), when it is built, and its result as numpy
columns.

:func:`scan` reads a trace's bytes once and gives the columns of its plain complete events
(no Python object per event) and the spans of every other event, which the Python reader
decodes as it always did (profkit.trace.nativefeed). Where the extension was not built or
cannot be imported, :func:`scan` returns None and profkit reads every trace in pure Python,
saying so once. ``PROFKIT_PURE_PYTHON=1`` asks for the pure-Python reader (the oracle of the
identity tests, tests/test_native_reader.py).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)

# The numeric args of the columns arg0.. (native/kineto/scan.c ARG_KEYS), as Args fields, and
# the raw JSON args of raw0.. (RAW_KEYS).
ARG_FIELDS = ("correlation", "external_id", "stream", "device", "blocks_per_sm",
              "occupancy_pct", "flops", "bytes")
RAW_FIELDS = ("input_dims", "input_types", "input_strides", "concrete_inputs")
_DTYPES = {"index": np.int64, "start": np.int64, "end": np.int64, "ts": np.float64,
           "dur": np.float64, "name": np.int32, "cat": np.int32, "pid": np.int64,
           "tid": np.int64, "pid_text": np.int32, "tid_text": np.int32, "coll": np.bool_,
           **{f"arg{i}": np.float64 for i in range(len(ARG_FIELDS))},
           **{f"raw{i}": np.int32 for i in range(len(RAW_FIELDS))}}
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
    events_span: tuple[int, int]  # the traceEvents array's byte span; (-1, -1): the root is it
    columns: dict[str, np.ndarray]  # the fast events' columns (file order)
    strings: list[str]  # distinct names, categories and text ids (columns name, cat, *_text)
    raw: list[bytes]  # distinct raw JSON of the args in RAW_FIELDS (columns raw0..)
    other: dict[str, np.ndarray]  # index, start, end of the events left to the Python reader

    def __len__(self) -> int:
        return len(self.columns["index"])


def scan(raw: bytes | bytearray) -> NativeScan | None:
    """The native reader's scan of trace JSON bytes; None when it is not built, or when it
    leaves the file to the Python reader (not strict JSON, nesting deeper than 64 levels,
    surrogate escapes, no traceEvents list: what the Python reader repairs or names)."""
    mod = _module()
    if mod is None:
        return None
    found = mod.scan(raw)
    if found is None:
        return None
    columns = {k: np.frombuffer(v, dtype=_DTYPES[k]) for k, v in found["columns"].items()}
    other = {k: np.frombuffer(v, dtype=np.int64) for k, v in found["other"].items()}
    return NativeScan(found["count"], found["events_span"], columns, found["strings"],
                      found["raw"], other)


def join_spans(raw: bytes | bytearray, starts: np.ndarray, ends: np.ndarray) -> bytes:
    """The byte spans of ``raw`` as one JSON array (one copy, in C)."""
    from profkit import _kineto

    return _kineto.join(raw, np.ascontiguousarray(starts, np.int64),
                          np.ascontiguousarray(ends, np.int64))


_module()  # said at import, in the command's own process, when the reader is missing
