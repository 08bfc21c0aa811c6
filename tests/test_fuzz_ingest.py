"""Property-based test: real traces with random values broken never break the reading.

Rank 1 of a real 2-rank run (samples/runs/zoo/communication) is replaced by a real trace
(that run's own rank 1, or a small trace of the public corpus) with a few random mutations:
a value anywhere replaced by another type, a huge number, NaN, deep nesting or invalid
UTF-8; a key dropped; events duplicated; the file truncated; or a value of run.json broken.
Whatever happens, ``load_run``, ``analyze_run(workers=1)`` and ``merge_run`` raise nothing
and log no traceback, rank 0 is read in full, and rank 1 is read or named in ``skipped``.

A second property adds to rank 1 a few ops with a cost formula whose arguments are what the
cost code reads, made hostile: ``Input Dims`` of many, huge, negative or non-integer
dimensions, odd dtypes in ``Input type``, odd ``Concrete Inputs`` and ``Input Strides``, and
``ph``, ``args``, ``ts`` or ``dur`` of the wrong JSON type. Those cost only their own op or
event: rank 1 is still read and analysed.
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
from hypothesis import HealthCheck, Phase, example, given, settings
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


def check_reading(run_dir: Path, bad: Path, raw: bytes, rank0_events: int, logged: Logged):
    """The checks of the module doc; returns the run and the analysis."""
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
    return run, analysis


# --- hostile op arguments: what the FLOP and byte formulas read ---------------------------
COST_OPS = ("aten::mul", "aten::add_", "aten::where", "aten::mm", "aten::matmul", "aten::linear",
            "aten::conv2d", "aten::convolution_backward", "aten::_flash_attention_forward",
            "aten::scaled_dot_product_attention", "aten::embedding_dense_backward",
            "aten::index_select", "aten::sum", "aten::native_layer_norm", "aten::cat",
            "aten::_to_copy", "aten::_foreach_add_", "aten::_fused_adamw_", "triton_poi_fused_0")
DIM = st.one_of(st.integers(-(2**63), 2**64 - 1), st.sampled_from([0, 1, 2**62, -1, 10**30]),
                st.floats(allow_nan=False, allow_infinity=False),  # JSON has neither
                st.booleans(), st.text(max_size=3), st.none())
SHAPE = st.one_of(st.lists(st.integers(0, 4), max_size=70), st.lists(DIM, max_size=40),
                  st.just([1] * 33), st.just([2**62] * 200))
ODD_JSON = st.one_of(DIM, st.dictionaries(st.text(max_size=2), DIM, max_size=2),
                     st.lists(st.lists(DIM, max_size=2), max_size=2))
ARGUMENT = st.one_of(SHAPE, st.lists(SHAPE, max_size=3), ODD_JSON)
DTYPE = st.one_of(st.sampled_from(["float", "c10::BFloat16", "c10::Half", "long int", "bool",
                                   "TensorList", "Scalar", "ScalarList", "", "weird",
                                   "c10::complex<float>", "c10::Float8_e4m3fn"]), ODD_JSON)
CONCRETE = st.one_of(st.sampled_from(["", "1", "-1", "[1]", "[0, 0]", "True", "[True, False]",
                                      "[1e308]", "99999999999999999999", "same", "x"]), ODD_JSON)
HOSTILE_OP = st.fixed_dictionaries({
    "name": st.sampled_from(COST_OPS),
    "Input Dims": st.one_of(st.lists(SHAPE, min_size=1, max_size=4),
                            st.lists(ARGUMENT, max_size=6), ODD_JSON),
    "Input type": st.one_of(st.lists(st.sampled_from(["float", "c10::BFloat16"]), min_size=4,
                                     max_size=4), st.lists(DTYPE, max_size=6), ODD_JSON),
    "Concrete Inputs": st.one_of(st.lists(CONCRETE, max_size=12), ODD_JSON),
    "Input Strides": st.one_of(st.none(), st.lists(ARGUMENT, max_size=6)),
    "broken": st.one_of(st.none(), st.tuples(st.sampled_from(["ph", "args", "ts", "dur"]),
                                             ODD_JSON)),
})


def with_hostile_ops(doc: dict, ops: list[dict]) -> dict:
    """``doc`` with ``ops`` added as CPU ops at the time of one of its own."""
    like = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    for op in ops:
        args = {k: v for k, v in op.items() if k not in ("name", "broken") and v is not None}
        event = {**like, "name": op["name"], "args": args}
        if op["broken"] is not None:
            event[op["broken"][0]] = op["broken"][1]
        doc["traceEvents"].append(event)
    return doc


# not shrunk: shrinking a failing case (a whole trace) took over five minutes
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.large_base_example, HealthCheck.data_too_large])
@given(ops=st.lists(HOSTILE_OP, min_size=1, max_size=4))
@example(ops=[{"name": "aten::mul", "Input Dims": [[1] * 33, [1] * 33], "Concrete Inputs": [],
               "Input type": ["float", "float"], "Input Strides": None, "broken": ("ph", [])}])
def test_hostile_op_arguments_never_cost_the_rank(ops, rank0_events):
    logged = Logged()
    logging.getLogger().addHandler(logged)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            case = {"source": 0, "mutations": [], "truncate": None, "gzip": True,
                    "run_json": None}
            bad, _ = build_run(Path(tmp), case)
            doc = json.loads(gzip.decompress(bad.read_bytes()))
            raw = encode(with_hostile_ops(doc, ops))
            bad.write_bytes(gzip.compress(raw))
            run, analysis = check_reading(bad.parent.parent, bad, raw, rank0_events, logged)
            assert 1 in run.ranks, [s.reason for s in run.skipped]
            assert 1 in analysis.run["ranks_analyzed"]
    finally:
        logging.getLogger().removeHandler(logged)
