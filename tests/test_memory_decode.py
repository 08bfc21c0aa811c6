"""The native feed's one decode of the instants with their args (nativefeed._decode_other,
memorysamples.MemoryInstant) gives the memory samples the raw path gives (the events with
raw args, their args decoded after): the same table and counts, on samples of every kind of
value, where the typed decode takes the batch and where it refuses it. The good samples'
values are checked against the JSON itself."""

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from profkit import schema as S
from profkit.trace import nativefeed
from profkit.trace.memorysamples import MemoryInstant, MemorySamples
from profkit.trace.traceevents import BATCH_DECODER, InstantEvent

GOOD = {"Total Reserved": 4096, "Total Allocated": 2560, "Bytes": 512, "Device Id": 0,
        "Device Type": 1, "Addr": 1402, "finished": False, "Ev Idx": 3}


def _mem(ts, name="[memory]", **changes):
    args = {**GOOD, **changes}
    return {"ph": "i", "name": name, "ts": ts, "pid": 1, "tid": 7,
            "args": {k: v for k, v in args.items() if v is not _DROP}}


_DROP = object()
TYPED = [  # batches the typed decode takes: ints, nulls, missing fields, no args
    [_mem(1.5), _mem(2.5, Bytes=-512, Addr=_DROP), _mem(3, "[OutOfMemory]", Addr=_DROP)],
    [_mem(4.0, Bytes=None), _mem(5.0, **{"Total Allocated": -1}), _mem(6.0, Addr=2**63),
     _mem(7.0, **{"Device Id": 2**40}), _mem(8.0, **{"Total Reserved": _DROP,
                                                     "Total Allocated": _DROP})],
    [{"ph": "i", "name": "Iteration Start", "ts": 1.0, "tid": "t", "args": {"x": "y"}},
     {"ph": "i", "name": "[memory]", "ts": 2.0, "tid": 3},
     {"ph": "i", "name": "[memory]", "ts": 3.0, "tid": 3, "args": None},
     {"ph": "i", "name": "[memory]", "ts": "9", "tid": 3, "args": GOOD}, _mem(10.0)],
    [_mem(1.0), _mem(2.0, Bytes=2**70)],  # an int past uint64: still an int (dropped)
]
REFUSED = [  # batches it refuses: floats, bools, text, no object, past float range
    [_mem(1.0), _mem(2.0, Bytes=1.0)],
    [_mem(1.0), _mem(2.0, **{"Device Type": True})],
    [_mem(1.0), {"ph": "i", "name": "[memory]", "ts": 2.0, "tid": 3, "args": "x"}],
    [_mem(1.0), {"ph": "i", "name": "[memory]", "ts": 2.0, "tid": 3, "args": [1]}],
    [_mem(1.0), _mem(2.0, Bytes="BIG")],  # 1e400
    [{"ph": "i", "name": "mark", "ts": 1.0, "tid": 3, "args": {"Bytes": "many"}}, _mem(3.0)],
]


def _json(events: list) -> bytes:
    text = json.dumps(events)
    return text.replace('"BIG"', "1e400").encode()


def _table(records: list) -> tuple[pd.DataFrame, int, int]:
    samples = MemorySamples((-1e18, 1e18))
    samples.add([e for e in records if type(e) in (InstantEvent, MemoryInstant)])
    return samples.frame(0), samples.dropped, samples.without_totals


def _spans(raw: bytes):
    """(starts, ends) of the elements of a JSON list of objects written by json.dumps."""
    starts, ends, depth, start = [], [], 0, 0
    for i, c in enumerate(raw):
        if c == ord("{"):
            depth += 1
            if depth == 1:
                start = i
        elif c == ord("}"):
            depth -= 1
            if depth == 0:
                starts.append(start)
                ends.append(i + 1)
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


@pytest.mark.parametrize("batch", TYPED + REFUSED + [sum(TYPED + REFUSED, [])])
def test_typed_decode_gives_the_raw_path_samples(batch):
    raw = _json(batch)
    records = nativefeed._decode_other(bytearray(raw), *_spans(raw), Counter())
    want = _table(BATCH_DECODER.decode(raw))
    got = _table(records)
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1:] == want[1:]
    typed = any(type(e) is MemoryInstant for e in records)
    assert typed == (batch in TYPED)


def test_typed_decode_reads_the_json_values():
    batch = TYPED[0] + TYPED[1]
    raw = _json(batch)
    table, dropped, older = _table(nativefeed._decode_other(bytearray(raw), *_spans(raw),
                                                            Counter()))
    # by hand: the null Bytes, Total Allocated -1 and Device Id 2**40 samples are dropped;
    # the one without totals is an older PyTorch's; Addr 2**63 is past int64: dropped too
    assert (dropped, older) == (4, 1)
    kept = [e for e in batch if e["ts"] in (1.5, 2.5, 3)]
    assert table[S.BYTES].tolist() == [e["args"]["Bytes"] for e in kept]
    assert table[S.ADDR].tolist() == [e["args"].get("Addr", -1) for e in kept]
    assert table[S.OUT_OF_MEMORY].tolist() == [False, False, True]
    assert table[S.TS_NS].tolist() == [1500, 2500, 3000]
