"""The analysis result cache holds data, never pickles: a cached report is byte for byte the
uncached one, and a corrupt or forged entry is a miss that runs no code."""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import os
import pickle
import random
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.executor import analyze_run

from profkit import datacodec
from profkit.cli import main
from profkit.cli.analyze import _render_analysis
from profkit.run import cache
from tests.conftest import REPO
from tests.factories import trace_doc, write_trace
from tests.test_bundled_runs import ALL, RUNS

FORMATS = ("json", "text", "markdown")


def analyze_cli(run: Path, *extra: str) -> bytes:
    """``profkit analyze RUN --format json``, in this process: its standard output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", str(run), "--format", "json", *extra]) == 0
    return out.getvalue().encode()


@dataclass
class Cached:
    run: Path  # a 2-rank run of hand-built traces whose analysis is cached
    report: bytes  # its JSON report, analysed without a cache
    entry: Path  # the cache entry
    good: bytes  # what profkit stored there


@pytest.fixture(scope="module")
def cached(tmp_path_factory) -> Cached:
    run = tmp_path_factory.mktemp("cache") / "run"
    for rank in (0, 1):
        write_trace(run / f"rank{rank}.json", trace_doc(rank=rank, world_size=2))
    report = analyze_cli(run, "--no-cache")
    assert analyze_cli(run) == report  # analysed again, and stored
    (entry,) = sorted((run / ".profkit" / "cache").glob("result-*"))
    return Cached(run, report, entry, entry.read_bytes())


def drop_reports(run: Path) -> None:
    """Remove the cached rendered reports, which are served before the result cache."""
    for report in (run / ".profkit" / "cache").glob("report-*"):
        report.unlink()


@pytest.fixture
def entry(cached):
    """The cached entry, put back as profkit wrote it after the test (the rendered reports
    removed, so that the command reads it)."""
    drop_reports(cached.run)
    yield cached.entry
    cached.entry.write_bytes(cached.good)
    drop_reports(cached.run)


def served_from_cache(caplog) -> bool:
    return any("from the result cache" in r.getMessage() for r in caplog.records)


def test_cache_holds_data_and_serves_the_same_report(cached, entry, caplog):
    assert entry.name.endswith(".data") and cached.good.startswith(datacodec.MAGIC)
    caplog.set_level(logging.DEBUG, logger="profkit")
    assert analyze_cli(cached.run) == cached.report
    assert served_from_cache(caplog)


def test_a_cached_report_is_printed_without_importing_the_analysis(cached):
    analyze_cli(cached.run)  # renders and stores the report (if not yet there)
    code = ("import sys; from profkit.cli import main; rc = main(['analyze', sys.argv[1], "
            "'--format', 'json']); print(rc, *(m in sys.modules for m in ('numpy', 'pandas',"
            " 'pyarrow', 'pyarrow.dataset', 'plotly', 'dask')), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, str(cached.run)], capture_output=True,
                          check=True)
    assert done.stdout == cached.report
    assert done.stderr.split()[-7:] == [b"0"] + [b"False"] * 6


@pytest.mark.parametrize("content", [
    b"", b"\x80 not JSON", b"[1, 2]", orjson.dumps({"data": 1, "summary": "s", "problems": []}),
    orjson.dumps({"data": "forged", "summary": "s", "problems": [3]}),
    orjson.dumps({"data": "forged", "summary": "s"})])
def test_a_damaged_report_entry_is_a_miss(cached, content):
    analyze_cli(cached.run)
    (report,) = (cached.run / ".profkit" / "cache").glob("report-*-json.json")
    report.write_bytes(content)
    assert analyze_cli(cached.run) == cached.report
    assert orjson.loads(report.read_bytes())["data"].encode() == cached.report  # stored again


def test_a_changed_run_is_not_served_its_old_report(cached, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(cached.run, run)
    analyze_cli(run)
    doc = trace_doc(rank=1, world_size=2)
    doc["traceEvents"] = doc["traceEvents"][: len(doc["traceEvents"]) // 2]
    write_trace(run / "rank1.json", doc)
    assert analyze_cli(run) == analyze_cli(run, "--no-cache") != cached.report


def test_the_code_key_follows_the_source_not_the_bytecode_python_writes(tmp_path):
    """A cached result is made stale by a change to profkit's source, never by Python
    writing a module's bytecode on its first import (which once made the first runs of a
    fresh install analyse every run again)."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    module = pkg / "sub" / "mod.py"
    module.write_text("X = 1\n")
    before = cache.code_fingerprint(pkg)
    subprocess.run([sys.executable, "-c", "import pkg.sub.mod"], cwd=tmp_path, check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    assert list(pkg.rglob("*.pyc")), "python wrote no bytecode: the test proves nothing"
    (pkg / "notes.txt").write_text("not code")
    assert cache.code_fingerprint(pkg) == before
    module.write_text("X = 2\n")
    assert cache.code_fingerprint(pkg) != before


@pytest.mark.parametrize("run_dir", [RUNS / "zoo" / "straggler", *[
    pytest.param(p, marks=pytest.mark.slow) for p in ALL if p.name != "straggler"]],
    ids=lambda p: str(p.relative_to(RUNS)))
def test_cached_report_is_the_uncached_one_on_bundled_runs(run_dir, tmp_path):
    run = tmp_path / run_dir.name
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns(".profkit"))
    fresh = analyze_run(run, cache=False)
    cache.store_result(run, "k", fresh)
    stored = cache._results_dir(run) / cache.RESULT_NAME.format(key="k")
    assert stored.read_bytes().startswith(datacodec.MAGIC)
    from_cache = cache.load_result(run, "k", Analysis)
    for fmt in FORMATS:
        assert _render_analysis(from_cache, fmt) == _render_analysis(fresh, fmt), fmt


class _Plant:
    """Unpickling this calls os.mkdir(path): proof that a pickle ran code."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_forged_pickle_entry_runs_no_code(cached, entry, tmp_path, caplog):
    planted = tmp_path / "planted"
    entry.write_bytes(pickle.dumps(_Plant(planted)))
    caplog.set_level(logging.DEBUG, logger="profkit")
    assert analyze_cli(cached.run) == cached.report
    assert not planted.exists() and not served_from_cache(caplog)


def _blob(tree) -> bytes:
    """A well-framed data blob holding ``tree`` as its JSON frame (see profkit.datacodec)."""
    frame = orjson.dumps(tree)
    return datacodec.MAGIC + struct.pack("<Q", len(frame)) + frame


UNREADABLE = {
    "empty": lambda good: b"",
    "truncated": lambda good: good[: len(good) // 2],
    "random bytes": lambda good: random.Random(7).randbytes(len(good)),
    "a pickle": lambda good: pickle.dumps({"verdict": {"summary": "forged"}}),
    "another type": lambda good: datacodec.encode({"verdict": {"summary": "forged"}}),
    "unregistered class": lambda good: _blob({"$dc": "subprocess:Popen",
                                              "f": {"args": ["touch", "/tmp/planted"]}}),
}


@pytest.mark.parametrize("kind", UNREADABLE)
def test_unreadable_entry_is_a_miss(cached, entry, caplog, kind):
    key = entry.name[len("result-"):-len(".data")]
    entry.write_bytes(UNREADABLE[kind](cached.good))
    caplog.set_level(logging.DEBUG, logger="profkit")
    assert cache.load_result(cached.run, key, Analysis) is None
    assert [r.levelno for r in caplog.records if "analysing again" in r.getMessage()] == [logging.DEBUG]


def _analysis_with(**fields) -> Analysis:
    base = dict(run={}, verdict={"primary": None, "summary": "x", "fractions": {}})
    return Analysis(**{**base, **fields})


def test_entries_that_do_not_render_are_analysed_again(cached, entry, caplog):
    caplog.set_level(logging.DEBUG, logger="profkit")
    for forged in (_analysis_with(verdict=["not", "a dict"]),
                   _analysis_with(tables={"rank_breakdown": 3})):
        entry.write_bytes(datacodec.encode(forged))
        key = entry.name[len("result-"):-len(".data")]
        assert cache.load_result(cached.run, key, Analysis) == forged  # decodes: only rendering tells
        caplog.clear()
        drop_reports(cached.run)
        assert analyze_cli(cached.run) == cached.report
        assert not served_from_cache(caplog)
        assert entry.read_bytes() == cached.good  # replaced by the fresh analysis


def test_load_result_never_raises_on_damaged_bytes(cached, entry):
    """A hundred truncations and a hundred random changes of a real entry: each is a miss
    or decodes to an Analysis, never an exception or a crash."""
    key = entry.name[len("result-"):-len(".data")]
    good, rng = cached.good, random.Random(11)
    damaged = [good[:n] for n in range(0, len(good), max(1, len(good) // 100))]
    for _ in range(100):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        damaged.append(bytes(data))
    for data in damaged:
        entry.write_bytes(data)
        result = cache.load_result(cached.run, key, Analysis)
        assert result is None or isinstance(result, Analysis)


_PICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "shelve", "joblib"}


def _pickle_uses(path: Path) -> list[str]:
    """Imports of a pickler, pandas' read/to_pickle and allow_pickle=True in one module."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            uses += [a.name for a in node.names if a.name.split(".")[0] in _PICKLERS]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _PICKLERS:
            uses.append(node.module)
        elif isinstance(node, ast.Attribute) and node.attr in ("read_pickle", "to_pickle"):
            uses.append(node.attr)
        elif isinstance(node, ast.keyword) and node.arg == "allow_pickle" and not (
                isinstance(node.value, ast.Constant) and node.value.value is False):
            uses.append("allow_pickle")
    return [f"{path.relative_to(REPO)}: {u}" for u in uses]


def test_no_pickle_outside_the_flight_recorder_reader():
    """Only profkit/nccl/flight_recorder.py may unpickle (PyTorch writes its dumps as pickles;
    its unpickler refuses every class)."""
    allowed = {REPO / "profkit" / "nccl" / "flight_recorder.py"}
    sources = [p for folder in ("profkit", "collectors", "analyzers", "dashboard", "bench")
               for p in (REPO / folder).rglob("*.py") if p not in allowed
               and not any(part.startswith(".venv") for part in p.relative_to(REPO).parts)]
    assert len(sources) > 50
    assert [u for p in sources for u in _pickle_uses(p)] == []
    assert _pickle_uses(REPO / "profkit" / "nccl" / "flight_recorder.py")  # the rule sees a real use
