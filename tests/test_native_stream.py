"""The native reader fed a trace piece by piece as it is read or gunzipped
(profkit.trace.native.scan_pieces, profkit.trace.readlimit.trace_pieces): the same scan as
of the bytes whole wherever the pieces are cut, the document around the events kept as it
was, and a rank's JSON never held whole."""

from __future__ import annotations

import gzip
import random
import shutil
import sys
import tracemalloc
from pathlib import Path

import orjson
import pytest

from profkit.trace import native, readlimit, tracefile
from profkit.trace.readlimit import read_trace_bytes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nativefuzz.seeds import seed_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
needs_native = pytest.mark.skipif(not native.available(), reason="native reader not built")
REAL = ["samples/runs/stock_ddp_stack/rank0.1795309441221999460.pt.trace.json.gz",
        "samples/runs/memory/gpt_b32/traces/rank0.pt.trace.json.gz"]


def assert_same_scan(a: native.NativeScan, b: native.NativeScan) -> None:
    assert (a.count, a.head, a.strings, a.raw, bytes(a.kept)) == \
        (b.count, b.head, b.strings, b.raw, bytes(b.kept))
    for name in ("columns", "other", "coll"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.keys() == y.keys()
        for key in x:  # bytes: NaN where NaN, the same bits
            assert x[key].tobytes() == y[key].tobytes(), (name, key)


def cut(raw: bytes, count: int, rng: random.Random) -> list[bytes]:
    at = sorted(rng.sample(range(1, len(raw)), min(count, len(raw) - 1)))
    return [raw[a:b] for a, b in zip([0, *at], [*at, len(raw)])]


@needs_native
@pytest.mark.parametrize("rel", REAL)
def test_pieces_scan_as_the_whole(rel, monkeypatch):
    raw = read_trace_bytes(ROOT / rel)
    whole = native.scan(raw)
    assert whole is not None and len(whole) > 5_000
    monkeypatch.setattr(native, "FEED_BYTES", 1)  # every piece fed as it comes
    fed = native.scan_pieces(cut(raw, 2000, random.Random(rel)))
    assert_same_scan(whole, fed)
    # the document around the events, as the file has it (recomputed from the JSON)
    doc = orjson.loads(raw)
    assert orjson.loads(fed.head) == {**doc, "traceEvents": []}
    assert fed.count == len(doc["traceEvents"])


@needs_native
def test_pieces_of_one_byte(monkeypatch):
    monkeypatch.setattr(native, "FEED_BYTES", 1)
    for raw in seed_bytes(15):
        whole = native.scan(raw)
        fed = native.scan_pieces([raw[i:i + 1] for i in range(len(raw))])
        assert (whole is None) == (fed is None)
        if whole is not None:
            assert_same_scan(whole, fed)


@needs_native
def test_a_value_longer_than_the_window_is_read(monkeypatch):
    # one event whose name is 300 KB: fed in 1 KB pieces it is retried as the window
    # doubles, and read whole
    name = "k" * 300_000
    raw = orjson.dumps({"traceEvents": [
        {"ph": "X", "name": "a", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, "tid": 7},
        {"ph": "X", "name": name, "cat": "kernel", "ts": 5, "dur": 2, "pid": 0, "tid": 7}]})
    monkeypatch.setattr(native, "FEED_BYTES", 1024)
    fed = native.scan_pieces([raw[i:i + 1024] for i in range(0, len(raw), 1024)])
    assert fed.strings == ["a", "kernel", name]
    assert fed.columns["ts"].tolist() == [1.0, 5.0]


@needs_native
@pytest.mark.parametrize("bad, declined", [
    (b'{"traceEvents": [], "traceEvents": []}', True),   # the key twice
    (b'{"traceEvents": [1, 2]} x', True),                 # bytes after the document
    (b'{"a": 1}', True),                                  # no traceEvents
    (b'{"traceEvents": [1, 2], "b": "\xff"}', True),      # not UTF-8, after the events
    (b'[{"ph": "M"}, 3]', False),                         # the root is the events
])
def test_pieces_decline_as_the_whole(bad, declined, monkeypatch):
    monkeypatch.setattr(native, "FEED_BYTES", 1)
    fed = native.scan_pieces([bad[i:i + 3] for i in range(0, len(bad), 3)])
    assert (fed is None) == declined == (native.scan(bad) is None)


@needs_native
@pytest.mark.parametrize("gz", [False, True])
def test_a_trace_is_never_held_whole(tmp_path, monkeypatch, gz):
    """What loading a rank holds beyond its columns and the events left to Python stays
    far below its JSON's size: the file is read (and gunzipped) piece by piece into the
    scanner. Reading it whole first, as before, held the JSON (19 MB) and the gzip."""
    raw = read_trace_bytes(ROOT / REAL[0])
    path = tmp_path / ("rank0.json.gz" if gz else "rank0.json")
    path.write_bytes(gzip.compress(raw, 1) if gz else raw)
    monkeypatch.setattr(native, "FEED_BYTES", 256 << 10)
    monkeypatch.setattr(readlimit, "_PLAIN_PIECE_BYTES", 256 << 10)
    monkeypatch.setattr(readlimit, "_STEP_BYTES", 256 << 10)
    tracemalloc.start()
    try:
        trace = tracefile.load(path)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    scan = trace.native
    held = len(scan.kept) + sum(a.nbytes for part in (scan.columns, scan.other, scan.coll)
                                for a in part.values())
    assert held < 0.6 * len(raw)  # the columns: ~0.5x the JSON
    assert peak_bytes - held < len(raw) / 8, (peak_bytes, held, len(raw))


@needs_native
def test_a_file_the_scanner_declines_is_read_again_whole(tmp_path):
    # invalid UTF-8 in a name, past the first pieces: the scan declines late, the Python
    # reader reads the file again and repairs it, as it does without the native reader
    doc = orjson.loads(read_trace_bytes(ROOT / REAL[1]))
    raw = orjson.dumps(doc).replace(b'"name":"', b'"name":"\xff', 1)
    path = tmp_path / "rank0.json"
    path.write_bytes(raw)
    trace = tracefile.load(path)
    assert trace.native is None and len(trace) == len(doc["traceEvents"])
    assert "invalid UTF-8 bytes replaced by U+FFFD" in list(trace.all_problems())


def test_gzip_members_and_padding_are_read_as_before(tmp_path):
    # two members, then zero padding: one document; data after the padding is refused
    raw = b'{"traceEvents": [' + b", ".join([b'{"ph": "M", "name": "n"}'] * 3) + b"]}"
    body = gzip.compress(raw[:20]) + gzip.compress(raw[20:])
    path = tmp_path / "t.json.gz"
    path.write_bytes(body + b"\0" * 70_000)
    assert bytes(read_trace_bytes(path)) == raw
    assert b"".join(readlimit.trace_pieces(path)) == raw
    path.write_bytes(body + b"\0" * 70_000 + b"x")
    with pytest.raises(Exception, match="data after the end of the gzip stream is not gzip"):
        read_trace_bytes(path)
    path.write_bytes(body[:-5])
    with pytest.raises(Exception, match="truncated"):
        tracefile.load(path)


@needs_native
@pytest.mark.parametrize("run", ["stock_ddp_stack", "memory/gpt_b32/traces", "broken"])
def test_merge_streamed_as_split_whole(run, tmp_path, monkeypatch):
    """profkit merge with every file streamed through the scanner (checked, then split as
    it is read) writes the bytes it writes with msgspec's split of the whole file; a file
    broken at its end gives no events either way (all or nothing), named alike."""
    from profkit.run.loader import load_run
    from profkit.timeline.merge import merge_run

    src = ROOT / "samples" / "runs" / ("stock_ddp" if run == "broken" else run)
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    loaded = load_run(run_dir, cache=False, workers=1)
    if run == "broken":  # rank 1's file cut short after it was loaded: merge meets it first
        path = Path(loaded.ranks[1].path)
        raw = read_trace_bytes(path)
        path.write_bytes(gzip.compress(raw[:-40]) if path.name.endswith(".gz") else raw[:-40])
    outputs, reports = [], []
    for streamed in (False, True):
        monkeypatch.setattr(tracefile, "STREAM_SPLIT_MIN_BYTES", 0 if streamed else 1 << 62)
        calls = []
        monkeypatch.setattr(native, "split_pieces", _counting(native.split_pieces, calls))
        out = tmp_path / f"m{streamed}.json"
        report = merge_run(loaded, out)
        assert bool(calls) == streamed
        outputs.append(out.read_bytes())
        reports.append((report.events_written, [(s.path, s.reason) for s in report.skipped]))
    assert outputs[0] == outputs[1] and reports[0] == reports[1]
    if run == "broken":
        assert any("truncated" in reason for _, reason in reports[0][1])


def _counting(func, calls: list):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return func(*args, **kwargs)
    return wrapped


def _check_doc(events: int) -> bytes:
    """A trace of ``events`` plain kernel events (~90 bytes each)."""
    one = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1500,"dur":2,' \
          b'"args":{"flops":1.5}}'
    return b'{"traceEvents":[' + b",".join([one] * events) + b"]}"


@needs_native
def test_a_feed_lets_other_threads_run():
    """The scan runs without the GIL: a Python thread makes progress while a feed runs.
    With a switch interval longer than the feed, a GIL held through the feed would let the
    thread run not once between the feed's start and its end."""
    import threading
    import time

    from profkit import _kineto

    doc = _check_doc(300_000)  # ~35 MB: tens of ms of scanning
    stamps: list[float] = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())
            for _ in range(200):
                pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.5)
    spinner = threading.Thread(target=spin)
    try:
        spinner.start()
        while not stamps:
            time.sleep(0.001)
        state = _kineto.scanner(native.COLUMNS)
        start = time.perf_counter()
        used = _kineto.feed(state, doc, True)
        end = time.perf_counter()
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)
    assert used == len(doc)
    inside = [t for t in stamps if start < t < end]
    assert len(inside) >= 10, (len(inside), end - start)
    found = native._result(_kineto.result(state))
    assert len(found) == 300_000 and set(found.columns["arg6"].tolist()) == {1.5}


@needs_native
def test_a_scanner_fed_in_one_thread_is_refused_to_another():
    import threading

    from profkit import _kineto

    doc = _check_doc(300_000)
    state = _kineto.scanner(native.CHECK)
    feeder = threading.Thread(target=_kineto.feed, args=(state, doc, True))
    refused = set()
    feeder.start()
    while feeder.is_alive():
        try:
            _kineto.drain(state)
        except ValueError as exc:
            refused.add(str(exc))
    feeder.join()
    assert "the scanner is being fed in another thread" in refused
    assert native._result(_kineto.result(state)).count == 300_000  # and it read them all


@needs_native
def test_long_numbers_are_read_as_python_reads_them():
    """Numbers of more than 53 bits of digits take the C library's parser in a scan without
    the GIL: each must be the double Python's float() gives (correctly rounded)."""
    rng = random.Random(43)
    texts = ["12345678901234567.5", "9007199254740993.0", "9007199254740993.5",
             "0.1000000000000000055511151231257827", "2.2250738585072011000000001",
             "179769313486231570.5"]
    texts += [f"{rng.randrange(10**15, 10**18)}.{rng.randrange(10**4)}" for _ in range(3000)]
    texts += [f"0.{'0' * rng.randrange(0, 12)}{rng.randrange(10**16, 10**19)}" for _ in range(3000)]
    events = ",".join('{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2,'
                      f'"args":{{"flops":{t}}}}}' for t in texts)
    found = native.scan(f'{{"traceEvents":[{events}]}}'.encode())
    read = dict(zip(found.columns["index"].tolist(), found.columns["arg6"].tolist()))
    assert len(read) == len(texts)  # every one read by the scanner, none left to Python
    assert all(read[i] == float(t) for i, t in enumerate(texts))


@needs_native
def test_scan_columns_are_handed_over_and_outlive_the_scan():
    """The columns are the scan's own buffers, lent to numpy (not copied): each array keeps
    its buffer alive after everything else of the scan is gone, and stays writable."""
    import gc

    found = native.scan(_check_doc(1000))
    ts, flops = found.columns["ts"], found.columns["arg6"]
    assert type(ts.base).__name__ == "Column"
    del found
    gc.collect()
    filler = [bytearray(len(ts) * 8) for _ in range(20)]  # memory freed early would be reused
    assert ts.tolist() == [1500.0] * 1000 and flops.tolist() == [1.5] * 1000
    ts[0] = 2.0
    assert ts[0] == 2.0 and len(filler) == 20
