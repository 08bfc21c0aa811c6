"""The native Kineto reader (native/kineto, profkit.trace.native) against its oracle, the
pure-Python reader: identical tables, metadata, problems and errors on every bundled, public
and corpus trace and on a fuzz corpus; the C scanner fuzzed under AddressSanitizer and
UBSan; the fallback when it is not built."""

from __future__ import annotations

import gzip
import logging
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
import orjson
import pandas as pd
import pytest

import profkit
from profkit.errors import TraceError
from profkit.trace import native, tracefile
from profkit.trace.ingest import build_tables

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nativefuzz.mutate import mutate  # noqa: E402
from nativefuzz.seeds import seed_bytes, write_seeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
NATIVE_SRC = ROOT / "native" / "kineto"
needs_native = pytest.mark.skipif(not native.available(), reason="native reader not built")


def _trace_files() -> list[Path]:
    found = []
    for top in (ROOT / "samples" / "runs", ROOT / "tests" / "data" / "public", CORPUS):
        for path in sorted(top.rglob("*.json*")) if top.is_dir() else ():
            if path.name.endswith((".json", ".json.gz")) and "/ranks/" not in str(path) \
                    and path.name != "run.json" and ".profkit" not in path.parts:
                found.append(path)
    return found


def _read(path: Path, pure: bool, monkeypatch) -> tuple:
    """(tables, metadata, problems, event count) of one trace, or ("error", problem)."""
    monkeypatch.setenv("PROFKIT_PURE_PYTHON", "1" if pure else "0")
    try:
        trace = tracefile.load(path)
    except TraceError as exc:
        return ("error", exc.problem)
    assert not pure or trace.native is None
    scanned = trace.native is not None
    tables, metadata = build_tables(trace)
    return (tables, [msgspec.json.encode(m) for m in metadata], list(trace.all_problems()),
            len(trace), scanned)


def assert_same_reading(path: Path, monkeypatch) -> tuple[bool, bool]:
    """Both readers read ``path`` alike; (whether it is a readable trace, whether the native
    reader read it rather than declining it)."""
    oracle = _read(path, True, monkeypatch)
    fast = _read(path, False, monkeypatch)
    if oracle[0] == "error" or fast[0] == "error":
        assert fast == oracle
        return False, False
    assert fast[0].keys() == oracle[0].keys()
    for name, table in oracle[0].items():
        pd.testing.assert_frame_equal(fast[0][name], table, check_exact=True, obj=name)
    assert fast[1:4] == oracle[1:4]
    return True, fast[4]


TRACES = _trace_files()


def test_every_kind_of_trace_is_collected():
    # the three sources are there (a missing corpus would make the identity test vacuous)
    assert sum("samples/runs" in str(p) for p in TRACES) >= 100
    assert sum("tests/data/public" in str(p) for p in TRACES) >= 10
    assert sum(str(CORPUS) in str(p) for p in TRACES) >= 10 or not CORPUS.is_dir()


@needs_native
@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_native_reader_matches_python_reader(path, monkeypatch):
    read, scanned = assert_same_reading(path, monkeypatch)
    assert scanned == read  # every real trace is one the native reader reads itself


@needs_native
def test_native_reader_reads_the_events_itself():
    # on a real trace the scanner takes the complete events (the Python decoder only the
    # rest): the columns' count is the file's count of plain 'X' events, recomputed here
    path = ROOT / "samples/runs/memory/gpt_b32/traces/rank0.pt.trace.json.gz"
    raw = gzip.decompress(path.read_bytes())
    events = orjson.loads(raw)["traceEvents"]
    plain_x = [e for e in events if e.get("ph") == "X"
               and all(isinstance(e.get(k), (int, str)) for k in ("pid", "tid"))]
    scan = native.scan(raw)
    assert scan.count == len(events)
    assert len(scan) == len(plain_x)
    assert np.array_equal(scan.columns["ts"], [float(e["ts"]) for e in plain_x])
    names = [scan.strings[i] for i in scan.columns["name"].tolist()]
    assert names == [e["name"] for e in plain_x]


@needs_native
def test_join_checks_every_span():
    from profkit import _kineto

    raw = b'[1,22,333]'
    assert native.join_spans(raw, np.array([1, 3]), np.array([2, 5])) == b"[1,22]"
    assert native.join_spans(raw, np.array([]), np.array([])) == b"[]"
    for starts, ends in (([0], [11]), ([5], [4]), ([-1], [2]), ([0, 1], [1])):
        with pytest.raises(ValueError):
            _kineto.join(raw, np.array(starts, np.int64), np.array(ends, np.int64))


def _fuzz_corpus(count: int) -> list[bytes]:
    rng = random.Random(43)
    seeds = seed_bytes(20)
    return seeds + [mutate(rng.choice(seeds), rng, rng.randint(1, 12)) for _ in range(count)]


@needs_native
def test_native_reader_matches_python_reader_on_fuzz_corpus(tmp_path, monkeypatch):
    declined_events = 0
    for i, raw in enumerate(_fuzz_corpus(150)):
        path = tmp_path / f"case{i}.json"
        path.write_bytes(raw)
        assert_same_reading(path, monkeypatch)
        scan = native.scan(raw)
        declined_events += 0 if scan is None else len(scan.other["index"])
    assert declined_events > 100  # the corpus reaches the events left to Python


def test_to_float_reads_each_value_alone():
    # found by the fuzz corpus: True was 1.0 in a batch of numbers but NaN in a batch holding
    # a list (and so read differently by the two readers, which batch events differently)
    from profkit.columns import to_float

    assert np.isnan(to_float([True, 2.0])[0]) and np.isnan(to_float([True, []])[0])
    assert to_float([True, 2.0])[1] == 2.0 and to_float([3, None])[0] == 3.0


def test_to_float_of_lists_is_nan(tmp_path):
    # found by the fuzz corpus: "correlation": [] on every event made a 2-D column
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                            "ts": 1.0 + i, "dur": 1.0, "args": {"correlation": []}}
                           for i in range(3)]}
    path = tmp_path / "lists.json"
    path.write_bytes(orjson.dumps(doc))
    ev = build_tables(tracefile.load(path))[0]["events"]
    assert len(ev) == 3 and (ev["correlation"] == -1).all()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_scanner_fuzzed_under_sanitizers(tmp_path, monkeypatch):
    """A short mutation-fuzz run of the C scanner under AddressSanitizer and UBSan (the
    long run is in BENCHMARKS.md); the inputs it accepted are then read by both readers."""
    exe = tmp_path / "fuzz_scan"
    build = subprocess.run(
        ["gcc", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         *(str(NATIVE_SRC / f) for f in ("fuzz_scan.c", "scan.c", "event.c", "store.c",
                                          "jscan.c")), "-lm",
         "-o", str(exe)], capture_output=True, text=True)
    if build.returncode and "libasan" in build.stderr + build.stdout:
        pytest.skip("gcc without the sanitizer runtimes")
    assert build.returncode == 0, build.stderr
    seeds = write_seeds(tmp_path / "seeds")
    saved = tmp_path / "accepted"
    saved.mkdir()
    seconds = os.environ.get("PROFKIT_FUZZ_SECONDS", "6")
    run = subprocess.run([str(exe), seconds, "43", "--save", str(saved), "20", *map(str, seeds)],
                         capture_output=True, text=True, timeout=float(seconds) * 10 + 60)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "no crash" in run.stdout
    if native.available():
        for path in sorted(saved.iterdir()):
            assert_same_reading(path, monkeypatch)


def test_pure_python_when_the_extension_is_missing(monkeypatch, caplog):
    path = ROOT / "samples/runs/memory/gpt_b32/traces/rank0.pt.trace.json.gz"
    monkeypatch.setenv("PROFKIT_PURE_PYTHON", "0")
    monkeypatch.setitem(sys.modules, "profkit._kineto", None)  # import fails
    monkeypatch.delattr(profkit, "_kineto", raising=False)
    monkeypatch.setattr(native, "_NOTED", [])
    monkeypatch.delenv("PROFKIT_NATIVE_NOTED", raising=False)
    with caplog.at_level(logging.WARNING, logger="profkit.trace.native"):
        first = tracefile.load(path)
        tracefile.load(path)
    assert first.native is None and len(first.raw_events) == len(first)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "reading traces in pure Python" in lines[0]
    assert os.environ["PROFKIT_NATIVE_NOTED"] == "1"  # a pool's workers say nothing more


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_install_builds_the_extension():
    # where gcc is, `pip install` built profkit._kineto (the README's first command)
    assert native.available()

