"""A name of megabytes costs its bytes, not the run: event names are cut at decode time
(their start and a hash, so that distinct long names stay distinct), with one note."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

from profkit.analyzers.executor import analyze_run

from profkit import schema as S
from profkit.run.loader import load_run
from profkit.validate import MAX_NAME_CHARS, cap_name
from tests.conftest import REPO
from tests.factories import kernel, trace_doc, write_trace

SOURCE = REPO / "samples" / "runs" / "zoo" / "compute" / "traces" / "rank0.pt.trace.json.gz"


def test_long_names_are_cut_and_stay_distinct():
    a, b = "k" * 20_000 + "a", "k" * 20_000 + "b"
    assert cap_name("short") == "short" and cap_name("x" * MAX_NAME_CHARS) == "x" * MAX_NAME_CHARS
    assert cap_name(a) != cap_name(b)
    assert cap_name(a).startswith("k" * MAX_NAME_CHARS + "\u2026#")
    assert len(cap_name(a)) == MAX_NAME_CHARS + 10 and cap_name(a) == cap_name(a)


def test_two_long_kernel_names_stay_two_kernels(tmp_path):
    long = "void gemm<" + "T" * 50_000
    events = [kernel(long + "a", 100.0, 10.0, corr=1), kernel(long + "b", 200.0, 10.0, corr=2),
              kernel(long + "a", 300.0, 10.0, corr=3)]
    run = load_run(write_trace(tmp_path / "rank0.json", trace_doc(events=events)), cache=False)
    names = run.ranks[0].events[S.NAME].astype(str)
    assert names.str.len().max() == MAX_NAME_CHARS + 10
    assert names.value_counts().sort_values().tolist() == [1, 2]
    assert [n for n in run.notes if "2 event names or categories longer than" in n]


def _analyze_s(run: Path) -> float:
    start = time.perf_counter()
    analysis = analyze_run(run, cache=False, workers=1)
    assert analysis.run["ranks_analyzed"] == [0]
    return time.perf_counter() - start


def test_a_16_mb_kernel_name_costs_about_its_bytes(tmp_path):
    """The same trace with one kernel renamed to 16 MB of text: it took 95 s to summarise
    before names were cut; now about as long as the trace without it."""
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    plain, huge = tmp_path / "plain", tmp_path / "huge"
    plain.mkdir(), huge.mkdir()
    (plain / "rank0.json").write_text(json.dumps(doc))
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    first["name"] = "void kernel<" + "x" * (16 << 20)
    (huge / "rank0.json").write_text(json.dumps(doc))
    _analyze_s(plain)  # imports and caches warmed
    without_s = min(_analyze_s(plain) for _ in range(2))
    with_s = min(_analyze_s(huge) for _ in range(2))
    assert with_s < 3 * without_s, (with_s, without_s)
    run = load_run(huge, cache=False)
    assert run.ranks[0].events[S.NAME].astype(str).str.len().max() == MAX_NAME_CHARS + 10
    assert [n for n in run.notes if "1 event names or categories longer than" in n]
