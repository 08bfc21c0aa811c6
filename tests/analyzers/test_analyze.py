"""The analysis as a whole: the JSON contract, text and Markdown reports, the CLI, and every
corpus trace without a crash."""

import json

import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.breakdown import PARTS, VERDICT_CLASSES
from profkit.analyzers.report.render import to_json, to_markdown, to_text

from profkit.run.loader import load_run
from tests.analysed import analysed_whole, loaded
from tests.conftest import CORPUS, REPO

RUNS = REPO / "samples" / "runs"
CLASSES = set(VERDICT_CLASSES)


def check_contract(doc):
    assert doc["schema"] == "profkit.analysis/1"
    assert {"world_size", "ranks_analyzed", "skipped_files"} <= set(doc["run"])
    assert {"primary", "summary"} <= set(doc["verdict"])
    for r in doc["ranks"]:
        assert {"rank", "steps", "step_time_ms", "breakdown", "verdict"} <= set(r)
        assert set(r["breakdown"]) == set(PARTS)
        assert sum(r["breakdown"].values()) == pytest.approx(1.0, abs=1e-6)
        assert r["verdict"]["primary"] in CLASSES
    for f in doc["findings"]:
        assert {"category", "severity", "rank", "message", "evidence", "recommendation"} <= set(f)
        assert f["severity"] in ("info", "warning", "critical")
    assert isinstance(doc["stragglers"], list)


def test_json_contract_on_the_bundled_run():
    doc = to_json(analysed_whole(RUNS / "stock_ddp"))
    check_contract(doc)
    assert doc["run"]["world_size"] == 2 and doc["run"]["ranks_analyzed"] == [0, 1]
    assert doc["verdict"]["primary"] == "compute"
    json.dumps(doc)  # plain JSON types only


def test_reports_lead_with_the_verdict_and_recommend():
    a = analysed_whole(RUNS / "zoo" / "data_loading")
    text = to_text(a)
    # the biggest win first, the verdict beside it (issue 42)
    assert text.splitlines()[3].startswith("BIGGEST WIN: rank 0 data loading")
    assert text.splitlines()[4].startswith("VERDICT: data loading bound")
    assert "num_workers" in text
    md = to_markdown(a)
    assert "**Verdict:** data loading bound" in md and "| severity | rank |" in md


def test_cli_analyze_json_to_file(tmp_path, profkit_main):
    out = tmp_path / "a.json"
    proc = profkit_main("analyze", RUNS / "zoo" / "host_sync", "--format", "json", "-o", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    check_contract(doc)
    assert doc["verdict"]["primary"] == "host_sync"


FILES = sorted(CORPUS.rglob("*.json.gz")) if CORPUS.is_dir() else []


@pytest.mark.skipif(not FILES, reason="corpus not found")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:40])
def test_every_corpus_trace_analyzes(path):
    a = analysed_whole(path)
    doc = to_json(a)
    json.dumps(doc)
    if not any(d.has_gpu for d in loaded(path).ranks.values()):
        assert doc["verdict"]["primary"] is None
        assert any("no GPU events" in f["message"] for f in doc["findings"])
    elif doc["verdict"]["primary"] is None:  # a trace of graph capture or lost records
        assert any(f["category"] == "trace" for f in doc["findings"])
    else:
        assert doc["verdict"]["primary"] in CLASSES


@pytest.mark.parametrize("name, stragglers", [
    ("zoo/straggler", [1]), ("zoo/balanced", []), ("stock_ddp", []), ("profkit_ddp", []),
])
def test_straggler_only_on_evidence(name, stragglers):
    doc = to_json(analysed_whole(RUNS / name))
    check_contract(doc)
    assert [s["rank"] for s in doc["stragglers"]] == stragglers
    if stragglers:
        assert "rank 1 is a straggler" in doc["verdict"]["summary"]
        assert doc["stragglers"][0]["evidence"]["others_wait_ms_per_step"] > 0.5
        assert any(f["category"] == "straggler" and f["rank"] == 1 for f in doc["findings"])


def test_misaligned_ranks_get_no_straggler_verdict(tmp_path):
    """Shift rank 0 of the straggler run by a second: waits would exceed whole steps."""
    import json as _json

    from tests.factories import write_trace

    src = RUNS / "zoo" / "straggler" / "traces"
    for rank in (0, 1):
        import gzip
        doc = _json.loads(gzip.decompress((src / f"rank{rank}.pt.trace.json.gz").read_bytes()))
        if rank == 0:
            doc["baseTimeNanoseconds"] += 1_000_000_000
        write_trace(tmp_path / f"rank{rank}.json", doc)
    doc = to_json(analyze(load_run(tmp_path, cache=False)))
    assert doc["stragglers"] == []
    assert any(f["category"] == "collectives" and "not aligned" in f["message"]
               for f in doc["findings"])


def test_communication_splits_into_waiting_and_transfer():
    doc = to_json(analysed_whole(RUNS / "zoo" / "straggler"))
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    for r in by_rank.values():
        split = r["communication_split"]
        assert split["wait"] + split["transfer"] == pytest.approx(r["breakdown"]["communication"])
    # rank 0 waits for the straggler: most of its exposed communication is waiting
    assert by_rank[0]["communication_split"]["wait"] > by_rank[0]["communication_split"]["transfer"]
    assert by_rank[1]["communication_split"]["wait"] < 0.01


def test_one_median_step_for_a_run_everywhere():
    """The verdict, diff's step samples and the dashboard's Runs page and Overview tile read
    one median step (they once showed 66.26, 66.735 and 65.29 ms for one run)."""
    import numpy as np
    from profkit.analyzers.compare.diff import step_samples
    from profkit.dashboard.ui.components import median_step_text

    a = analysed_whole(REPO / "samples" / "runs" / "profkit_fsdp")
    steps = a.table("step_breakdown")
    used = steps[steps["used"].astype(bool)]
    by_step = {s: float(np.median(g["step_ns"])) for s, g in used.groupby("step")}
    expected_ms = float(np.median(list(by_step.values()))) / 1e6  # computed here, by hand
    assert a.verdict["median_step_ms"] == pytest.approx(expected_ms, abs=1e-3)
    assert float(np.median(step_samples(a))) / 1e6 == pytest.approx(expected_ms)
    assert f"median step {expected_ms:.2f} ms" in a.verdict["summary"]
    assert median_step_text(a) == f"{expected_ms:.2f} ms"
