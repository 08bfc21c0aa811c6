"""Property-based test: real traces with random values broken never break the reading.

Rank 1 of a real 2-rank run (samples/runs/zoo/communication) is replaced by a real trace
(that run's own rank 1, or a small trace of the public corpus) with a few random mutations:
a value anywhere replaced by another type, a huge number, NaN, deep nesting or invalid
UTF-8; a key dropped; events duplicated; the file truncated; or a value of run.json broken.
Whatever happens, ``load_run``, ``analyze_run(workers=1)`` and ``merge_run`` raise nothing
and log no traceback, rank 0 is read in full, and rank 1 is read or named in ``skipped``.
Derandomized and without an example database, so every run tries the same examples.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profkit.analyzers.executor import analyze_run

from profkit.run.loader import load_run
from profkit.timeline.merge import merge_run
from tests.conftest import CORPUS, REPO

RUN = REPO / "samples" / "runs" / "zoo" / "communication"
SOURCES = [RUN / "traces" / "rank1.pt.trace.json.gz",
           CORPUS / "hta" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
           CORPUS / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
           CORPUS / "hta" / "triton_example" / "triton_example.json.gz"]
SOURCES = [p for p in SOURCES if p.exists()]
DEEP, BAD_UTF8 = "\u0001deep\u0001", "\u0001utf8\u0001"  # placeholders, replaced as bytes
VALUES = {
    "list": ["a", 1], "object": {"k": [1]}, "text": "abc", "number text": "12.5",
    "true": True, "null": None, "empty": "", "zero": 0, "minus one": -1,
    "huge float": 1e308, "-huge float": -1e308, "huge int": 10**30, "-huge int": -(10**30),
    "2**64": 2**64, "NaN": float("nan"), "inf": float("inf"), "deep": DEEP,
    "bad utf-8": BAD_UTF8,
}
HEADER_KEYS = ("baseTimeNanoseconds", "distributedInfo", "deviceProperties", "host_name",
               "trace_id", "schemaVersion")
RUN_JSON_KEYS = ("world_size", "clock_offsets_ns", "ranks", "hosts", "gpus", "run_id", "status")


def paths(value, prefix=()):
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield prefix + (key,)
        yield from paths(child, prefix + (key,))


def parent_of(doc, path):
    for key in path[:-1]:
        doc = doc[key]
    return doc


def mutate(doc, kind: str, where: int, value_name: str, header: bool):
    """Apply one mutation to the document in place (or to the whole document)."""
    if kind == "duplicate" and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
        doc["traceEvents"] = events + events[where % max(len(events), 1):][:50]
        return
    pool = [p for p in paths(doc) if not header or p[0] in HEADER_KEYS + RUN_JSON_KEYS] \
        or list(paths(doc))
    if not pool:
        return
    path = pool[where % len(pool)]
    parent = parent_of(doc, path)
    if kind == "drop" and isinstance(parent, dict):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = VALUES[value_name]


def encode(doc) -> bytes:
    deep = b"[" * 1000 + b"1" + b"]" * 1000
    raw = json.dumps(doc).encode()  # NaN and Infinity as the non-standard tokens
    return raw.replace(json.dumps(DEEP).encode(), deep).replace(
        json.dumps(BAD_UTF8).encode(), b'"\xff\xfe"')


MUTATION = st.tuples(st.sampled_from(["replace", "replace", "drop", "duplicate"]),
                     st.integers(0, 10**6), st.sampled_from(sorted(VALUES)), st.booleans())
CASE = st.fixed_dictionaries({
    "source": st.integers(0, len(SOURCES) - 1),
    "mutations": st.lists(MUTATION, min_size=1, max_size=3),
    "truncate": st.one_of(st.none(), st.floats(0.0, 1.0)),
    "gzip": st.booleans(),
    "run_json": st.one_of(st.none(), MUTATION),
})


def build_run(folder: Path, case: dict) -> tuple[Path, bytes]:
    """The run: rank 0 as captured, rank 1 the chosen source mutated; returns rank 1's file
    and its JSON bytes."""
    run = folder / "run"
    (run / "traces").mkdir(parents=True)
    shutil.copy(RUN / "traces" / "rank0.pt.trace.json.gz", run / "traces")
    shutil.copytree(RUN / "ranks", run / "ranks")
    meta = json.loads((RUN / "run.json").read_text())
    if case["run_json"] is not None:
        mutate(meta, *case["run_json"])
    (run / "run.json").write_bytes(encode(meta))
    doc = json.loads(gzip.decompress(SOURCES[case["source"]].read_bytes()))
    if isinstance(doc.get("distributedInfo"), dict):  # a corpus trace joins this run as rank 1
        doc["distributedInfo"].update(rank=1, world_size=2)
    for mutation in case["mutations"]:
        mutate(doc, *mutation)
    raw = encode(doc)
    if case["truncate"] is not None:
        raw = raw[: int(len(raw) * case["truncate"])]
    path = run / "traces" / ("rank1.json.gz" if case["gzip"] else "rank1.json")
    path.write_bytes(gzip.compress(raw) if case["gzip"] else raw)
    return path, raw


@pytest.fixture(scope="module")
def rank0_events() -> int:
    return len(load_run(RUN, cache=False, workers=1).ranks[0].events)


class Logged(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=CASE)
def test_mutated_rank_never_breaks_reading(case, rank0_events):
    logged = Logged()
    logging.getLogger().addHandler(logged)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            bad, raw = build_run(Path(tmp), case)
            check_reading(bad.parent.parent, bad, raw, rank0_events, logged)
    finally:
        logging.getLogger().removeHandler(logged)


def check_reading(run_dir: Path, bad: Path, raw: bytes, rank0_events: int, logged: Logged) -> None:
    run = load_run(run_dir, cache=False, workers=1)
    analysis = analyze_run(run_dir, cache=False, workers=1)
    out = run_dir.parent / "merged.json"
    merge_run(run, out)
    merged = json.loads(out.read_bytes())  # valid JSON (Python's reader takes 1e400 too)
    assert len(run.ranks[0].events) == rank0_events
    assert 0 in analysis.run["ranks_analyzed"]
    assert any(0 <= e.get("pid", -1) < 1000 for e in merged["traceEvents"])
    skipped = {s.path: s.reason for s in run.skipped}
    assert 1 in run.ranks or str(bad) in skipped, (skipped, run.rank_ids)
    assert not [r for r in logged.records if r.exc_info], "a traceback was logged"
    reasons = list(skipped.values()) + [s["reason"] for s in analysis.run["skipped_files"]]
    assert not [r for r in reasons if "could not be read (" in r or "analysis failed" in r]
    if 1 in run.ranks and b"\xff\xfe" in raw:  # always repaired, so always noted
        assert [n for n in run.notes if str(bad) in n and "UTF-8" in n], run.notes
