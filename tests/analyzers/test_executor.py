"""The map/reduce analysis: every executor gives the report the in-process analysis gives."""

import shutil
from pathlib import Path

import orjson
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.executor import analyze_run, plan_tasks, reduce_results, summarize_file
from profkit.analyzers.report.render import to_json

from profkit.run import loader
from profkit.run.loader import load_run
from profkit.trace.synthetic import make_run
from tests.analysed import analysed, analysed_whole
from tests.realruns import copy_run, read_doc, split_cycles, write_doc, write_profkit_cycles

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "samples" / "runs"
SOURCE = RUNS / "zoo" / "balanced" / "traces" / "rank0.pt.trace.json.gz"


def report(analysis) -> bytes:
    return orjson.dumps(to_json(analysis), option=orjson.OPT_SERIALIZE_NUMPY)


def assert_same(a, b) -> None:
    """Same report and the same tables, value for value."""
    assert report(a) == report(b)
    assert sorted(a.tables) == sorted(b.tables)
    for name in a.tables:
        pd.testing.assert_frame_equal(a.tables[name].reset_index(drop=True),
                                      b.tables[name].reset_index(drop=True), obj=name)


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("synthetic") / "run"
    make_run(SOURCE, out, 8, group_size=4, straggler=6, slow_group=0, seed=3)
    return out


@pytest.fixture(scope="module")
def in_process(synthetic):
    """The synthetic run read whole and analysed in this process: what every executor must
    give."""
    return analyze(load_run(synthetic, cache=False))


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as lc, distributed.Client(lc) as client:
        yield client


@pytest.mark.parametrize("run", ["stock_ddp", "zoo/straggler", "profkit_fsdp"])
def test_map_reduce_equals_the_in_process_analysis(run):
    whole = analysed_whole(RUNS / run)  # analyze(load_run(run)), shared with other tests
    assert_same(analysed(RUNS / run), whole)  # analyze_run(run, workers=1), shared too
    assert_same(analyze_run(RUNS / run, workers=2, cache=False), whole)  # a local process pool


def test_local_pool_and_dask_cluster_give_identical_reports(synthetic, cluster, in_process):
    pool = analyze_run(synthetic, workers=2, cache=False)
    dask = analyze_run(synthetic, scheduler=cluster, cache=False)
    assert_same(pool, dask)
    assert_same(pool, in_process)


def test_planted_straggler_and_slow_group_are_found(synthetic, cluster):
    analysis = analyze_run(synthetic, scheduler=cluster)
    assert [s["rank"] for s in analysis.stragglers] == [6]
    slow = analysis.table("group_latency")
    assert set(slow.loc[slow["slow"], "pg"]) == {"group0"}
    assert slow.loc[slow["slow"], "ranks"].tolist() == ["0-3"]
    assert [f.evidence["pg"] for f in analysis.findings if "slow link" in f.message] == ["group0"]


def test_no_plant_no_flag(tmp_path):
    make_run(SOURCE, tmp_path / "run", 8, group_size=4, seed=1)
    analysis = analyze_run(tmp_path / "run", workers=2)
    assert analysis.stragglers == []
    assert not analysis.table("group_latency")["slow"].any()


def test_a_bad_file_on_the_cluster_is_skipped_and_the_rest_analysed(synthetic, cluster, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for f in sorted(synthetic.glob("rank*.json.gz"))[:4]:
        (run / f.name).write_bytes(f.read_bytes())
    (run / "rank4.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00truncated")
    analysis = analyze_run(run, scheduler=cluster, cache=False)
    assert analysis.run["ranks_analyzed"] == [0, 1, 2, 3]
    [bad] = analysis.run["skipped_files"]
    assert bad["path"].endswith("rank4.pt.trace.json.gz") and "gzip" in bad["reason"]


def test_unranked_files_are_numbered_as_the_loader_numbers_them(tmp_path):
    for i, name in enumerate(("b.json", "a.json")):
        src = RUNS / "zoo" / "compute" / "traces" / "rank0.pt.trace.json.gz"
        doc = orjson.loads(__import__("gzip").decompress(src.read_bytes()))
        doc.pop("distributedInfo", None)
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ts", 0) >= 0][: 2000 + i]
        (tmp_path / name).write_bytes(orjson.dumps(doc))
    mapped = analyze_run(tmp_path, workers=2)
    assert_same(mapped, analyze(load_run(tmp_path)))
    assert mapped.run["ranks_analyzed"] == [0, 1]


def test_cli_scheduler_local(tmp_path, synthetic, in_process, capsys):
    from profkit.cli import main

    out = tmp_path / "report.json"
    assert main(["analyze", str(synthetic), "--scheduler", "local", "--workers", "2",
                 "--format", "json", "-o", str(out), "--no-cache"]) == 0
    got = orjson.loads(out.read_bytes())
    assert got == orjson.loads(report(in_process))


def test_unreachable_scheduler_is_a_clear_error(synthetic, capsys, monkeypatch):
    from profkit.cli import main

    monkeypatch.setenv("PROFKIT_DASK_TIMEOUT_S", "2")
    code = main(["analyze", str(synthetic), "--scheduler", "tcp://127.0.0.1:9", "--no-cache"])
    assert code != 0
    assert "Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err


# --- a rank's files: profiler cycles and strangers through the map and the reduce ----------

STRAGGLER = RUNS / "zoo" / "straggler"
STRANGER = RUNS / "zoo" / "balanced" / "traces" / "rank1.pt.trace.json.gz"  # pid 1135, later


def test_profiler_cycles_are_one_task_per_rank_and_match_the_loader(tmp_path):
    run = copy_run("zoo/straggler", tmp_path / "run")
    write_profkit_cycles(run, [2, 3])
    _, folder, meta, files, _ = loader.open_run(run)
    tasks = plan_tasks(folder, meta, files, True, None)
    assert [sorted(Path(p).name for p in t.files) for t in tasks] == [
        ["rank0.cycle1.pt.trace.json.gz", "rank0.pt.trace.json.gz"],
        ["rank1.cycle1.pt.trace.json.gz", "rank1.pt.trace.json.gz"]]
    whole = analyze(load_run(run))
    assert whole.run["notes"] == ["ranks 0-1: 2 profiler cycles read as steps 2-4"]
    assert_same(analyze_run(run, workers=2), whole)  # a local process pool
    assert_same(analyze_run(run, workers=1, cycle=1), analyze(load_run(run, cycle=1)))


def test_cycles_the_names_do_not_group_are_summarised_together_after_the_reduce(tmp_path):
    # Renamed stock traces: nothing in the names ties a rank's two cycles together, so the
    # map reads each file alone and the reduce asks for each rank's files once more.
    for rank in (0, 1):
        doc = read_doc(STRAGGLER / "traces" / f"rank{rank}.pt.trace.json.gz")
        for k, cycle in enumerate(split_cycles(doc, [2, 3])):
            write_doc(tmp_path / f"{'ab'[k]}{rank}.json.gz", cycle)
    root, folder, meta, files, skipped = loader.open_run(tmp_path)
    asked = []

    def remap(tasks):
        asked.extend(sorted(Path(p).name for p in t.files) for t in tasks)
        return [summarize_file(t) for t in tasks]

    results = [summarize_file(t) for t in plan_tasks(folder, meta, files, True, None)]
    assert len(results) == 4 and all(r.meta["pid"] in (1058, 1059) for r in results)
    mapped = reduce_results(root, meta, files, skipped, results, remap=remap)
    assert asked == [["a0.json.gz", "b0.json.gz"], ["a1.json.gz", "b1.json.gz"]]
    assert_same(mapped, analyze(load_run(tmp_path)))
    assert mapped.run["ranks_analyzed"] == [0, 1] and mapped.run["skipped_files"] == []


def test_a_stranger_grouped_with_a_rank_by_name_is_told_apart_in_the_reduce(tmp_path):
    # tensorboard_trace_handler names ({worker}.{ns}): the stranger's name puts it in rank
    # 1's task; its process and time set it apart, and rank 1 is summarised on its own.
    for rank in (0, 1):
        shutil.copy(STRAGGLER / "traces" / f"rank{rank}.pt.trace.json.gz",
                    tmp_path / f"rank{rank}.1795306995441251087.pt.trace.json.gz")
    clean = analyze(load_run(tmp_path))
    shutil.copy(STRANGER, tmp_path / "rank1.000001.pt.trace.json.gz")
    mapped = analyze_run(tmp_path, workers=1)
    assert_same(mapped, analyze(load_run(tmp_path)))
    assert mapped.verdict == clean.verdict
    [skip] = mapped.run["skipped_files"]
    assert skip["path"] == str(tmp_path / "rank1.000001.pt.trace.json.gz")
    assert "do not overlap the other ranks' time" in skip["reason"]


def test_a_task_result_with_its_files_round_trips_as_data():
    from profkit.analyzers.executor import FileResult

    from profkit import datacodec

    res = FileResult("a.json", parts=[FileResult("a.json", {"pid": 7, "span_ns": [1, 2]}),
                                      FileResult("b.json", error="empty file")])
    back = datacodec.decode(datacodec.encode(res))
    assert back == res and back.covers() == frozenset()
    assert [r.path for r in back.records()] == ["a.json", "b.json"]
