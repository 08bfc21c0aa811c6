"""The native reader's allocator samples (scan.h M_*): the plain [memory] and [OutOfMemory]
instants are read into columns, every other form is left to the Python reader, and the
memory table is the pure-Python reader's either way (its oracle), row for row, also where
samples of one time come by both paths."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from profkit.trace import native

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_native_reader import assert_same_reading, needs_native  # noqa: E402

ARGS = {"Addr": 4096, "Bytes": 512, "Total Allocated": 1024, "Total Reserved": 2048,
        "Device Id": 0, "Device Type": 1}


def _sample(ts, tid=7, name="[memory]", **args) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": name, "pid": 1,
            "tid": tid, "ts": ts, "args": {**ARGS, **args}}


# (event, whether the native reader reads it itself)
CASES = [
    (_sample(10.5), True),
    (_sample(10.5, Bytes=-512), True),  # a free, at the time of the one above
    (_sample(10.5, **{"Total Allocated": None}), False),  # a null: the Python reader's
    ({**_sample(10.5, Bytes=256), "x": 1e300}, False),  # an exponent: read (and kept) there
    ({**_sample(10.5, Bytes=128), "tid": None}, False),  # kept there too
    (_sample(11, name="[OutOfMemory]", Addr=None), False),
    ({**_sample(11, name="[OutOfMemory]"), "args": {k: v for k, v in ARGS.items()
                                                     if k != "Addr"}}, True),  # no Addr
    (_sample(12, tid="stream 7"), True),  # a text tid
    (_sample(12, tid="12"), True),  # a text tid that reads as a number
    (_sample(12.25, Bytes=1 << 63), False),  # past int64: the Python reader's
    (_sample(12.5, Bytes=(1 << 62) + 5), False),  # past what the scanner keeps exact
    (_sample(13, **{"Device Type": 400}), True),  # out of range: dropped by both
    (_sample(13, Bytes=512.0), False),  # a fraction
    (_sample(1e300), False),  # an exponent, and out of the epoch range
    (_sample(14, **{"Device Id": -1}), True),  # a CPU sample
    ({**_sample(15), "args": {"Bytes": 512, "Device Id": 0}}, False),  # older PyTorch
    ({**_sample(16), "tid": None}, False),
    ({k: v for k, v in _sample(16).items() if k != "tid"}, False),
    ({**_sample(16.5), "name": "[memory] "}, False),  # another instant
    (_sample("17"), False),  # text ts
]


def _trace(events: list[dict]) -> bytes:
    complete = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": 9,
                "dur": 20, "args": {"External id": 1}}
    return orjson.dumps({"traceEvents": [complete, *events]})


@needs_native
def test_each_form_is_read_by_the_reader_meant_for_it():
    raw = _trace([event for event, _ in CASES])
    scan = native.scan(raw)
    read = set(scan.memory["index"].tolist())
    assert read == {i + 1 for i, (_, plain) in enumerate(CASES) if plain}
    row = int(np.flatnonzero(scan.memory["index"] == 1)[0])
    assert scan.memory["ts"][row] == 10.5 and scan.memory["bytes"][row] == 512
    assert scan.memory["addr"][scan.memory["index"] == 7][0] == -1  # Addr absent
    assert scan.memory["oom"].tolist() == [i == 7 for i in sorted(read)]


@needs_native
@pytest.mark.parametrize("order", ["as listed", "reversed", "shuffled"])
def test_memory_table_is_the_python_readers(tmp_path, monkeypatch, order):
    events = [event for event, _ in CASES]
    if order == "reversed":
        events = events[::-1]
    elif order == "shuffled":
        events = [events[i] for i in np.random.default_rng(43).permutation(len(events))]
    path = tmp_path / "memory.json"
    path.write_bytes(_trace(events * 3))  # every time shared by samples of both paths
    read, scanned = assert_same_reading(path, monkeypatch)
    assert read and scanned
