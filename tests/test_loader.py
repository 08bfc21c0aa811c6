import json

import numpy as np
import pytest

from profkit import cache
from profkit import schema as S
from profkit.errors import NoTracesError, RunConflictError
from profkit.loader import load_run
from tests.factories import BASE_NS, trace_doc, write_trace


def reasons(run):
    return {p.split("/")[-1]: r for p, r in ((s.path, s.reason) for s in run.skipped)}


@pytest.mark.parametrize("names", [
    ("rank0.json", "rank1.json"),
    ("rank-0.json.gz", "rank-1.json.gz"),
    ("host_123.1700000000000000000.pt.trace.json.gz", "host_456.1700000000000000001.pt.trace.json.gz"),
])
def test_stock_namings_take_rank_from_distributed_info(tmp_path, names):
    # Write rank 1 under the first name, so file order alone would get it wrong.
    write_trace(tmp_path / names[0], trace_doc(rank=1))
    write_trace(tmp_path / names[1], trace_doc(rank=0))
    run = load_run(tmp_path)
    assert run.rank_ids == [0, 1]
    assert run.ranks[1].path.endswith(names[0])
    assert run.world_size == 2
    assert {d.rank_source for d in run.ranks.values()} == {"distributedInfo"}


def test_rank_from_file_name_then_file_order(tmp_path):
    write_trace(tmp_path / "rank3.json", trace_doc(rank=None))
    write_trace(tmp_path / "zzz.json", trace_doc(rank=None))
    run = load_run(tmp_path)
    assert run.ranks[3].rank_source == "file name"
    assert run.ranks[0].rank_source == "file order"
    assert any("file order" in n for n in run.notes)


def test_bad_and_foreign_files_are_skipped_and_others_load(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    bad = write_trace(tmp_path / "rank1.json.gz", trace_doc(rank=1))
    bad.write_bytes(bad.read_bytes()[:100])
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    run = load_run(tmp_path)
    assert run.rank_ids == [0]
    why = reasons(run)
    assert "gzip" in why["rank1.json.gz"]
    assert "not a trace file" in why["notes.txt"]
    assert "no traceEvents" in why["config.json"]


def test_only_bad_files_is_an_error_naming_them(tmp_path):
    (tmp_path / "rank0.json").write_text("{")
    with pytest.raises(NoTracesError, match="rank0.json"):
        load_run(tmp_path)


def test_duplicate_rank_is_reported(tmp_path):
    write_trace(tmp_path / "a.json", trace_doc(rank=0))
    write_trace(tmp_path / "b.json", trace_doc(rank=0))
    run = load_run(tmp_path)
    assert run.rank_ids == [0]
    assert "duplicate rank 0" in reasons(run)["b.json"]
    with pytest.raises(RunConflictError):
        load_run(tmp_path, strict=True, cache=False)


def test_trace_of_another_run_is_reported(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=2))
    write_trace(tmp_path / "rank1.json", trace_doc(rank=1, world_size=2))
    write_trace(tmp_path / "rank5.json", trace_doc(rank=5, world_size=8))
    run = load_run(tmp_path)
    assert run.rank_ids == [0, 1]
    assert "another run" in reasons(run)["rank5.json"]


def test_cache_is_written_reused_and_bypassed(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    first = load_run(tmp_path)
    folder = tmp_path / ".profkit" / "cache"
    assert cache.load(path) is not None and any(folder.iterdir())
    again = load_run(tmp_path)
    for table in ("events", "collectives", "steps"):
        a, b = getattr(first.ranks[0], table), getattr(again.ranks[0], table)
        assert a.reset_index(drop=True).equals(b.reset_index(drop=True)), table
    # A changed file is re-read, not served stale.
    write_trace(path, trace_doc(rank=0, events=trace_doc()["traceEvents"][:3]))
    assert len(load_run(tmp_path).ranks[0].events) == 3


def test_no_cache_writes_nothing(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    load_run(tmp_path, cache=False)
    assert not (tmp_path / ".profkit").exists()


def test_profkit_run_directory_applies_clock_offsets(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0))
    write_trace(tmp_path / "traces" / "rank1.pt.trace.json.gz", trace_doc(rank=1))
    (tmp_path / "run.json").write_text(json.dumps({
        "schema": "profkit.run/1", "world_size": 2, "status": "ok",
        "clock_offsets_ns": {"0": 0, "1": 250_000}}))
    run = load_run(tmp_path)
    t0 = run.ranks[0].steps[S.TS_NS].iloc[0]
    t1 = run.ranks[1].steps[S.TS_NS].iloc[0]
    assert t0 == BASE_NS and t1 == BASE_NS - 250_000


def test_nvml_samples_become_counters(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (tmp_path / "nvml").mkdir()
    np.savez(tmp_path / "nvml" / "rank0.0.npz", ts_ns=np.array([BASE_NS, BASE_NS + 10**8]),
             gpu=np.array([0, 0]), sm_clock_mhz=np.array([1980.0, 1755.0]),
             power_w=np.array([300.0, np.nan]))
    counters = load_run(tmp_path).ranks[0].counters
    clocks = counters[counters[S.METRIC] == "sm_clock_mhz"]
    assert list(clocks[S.VALUE]) == [1980.0, 1755.0]
    assert len(counters[counters[S.METRIC] == "power_w"]) == 1  # the NaN reading is dropped


def test_single_file(tmp_path):
    path = write_trace(tmp_path / "whatever.json", trace_doc(rank=4, world_size=8))
    run = load_run(path)
    assert run.rank_ids == [4] and run.world_size == 8


def test_a_failed_rank_marks_the_run_failed(tmp_path):
    for r in (0, 1):
        write_trace(tmp_path / "traces" / f"rank{r}.pt.trace.json.gz", trace_doc(rank=r))
    (tmp_path / "run.json").write_text(json.dumps({"schema": "profkit.run/1", "world_size": 2,
                                                   "status": "ok"}))
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.json").write_text(json.dumps({"rank": 0, "status": "ok"}))
    (tmp_path / "ranks" / "rank1.json").write_text(json.dumps({"rank": 1, "status": "failed"}))
    run = load_run(tmp_path)
    assert run.meta["status"] == "failed" and run.meta["failed_ranks"] == [1]
    assert run.skipped == []  # the status files are not mistaken for traces


def test_on_demand_captures_are_separate_runs(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    capture = tmp_path / "capture-1-20261122T000000"
    write_trace(capture / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (capture / "run.json").write_text("{}")
    run = load_run(tmp_path)
    assert run.ranks[0].path.startswith(str(tmp_path / "traces"))
    assert "on-demand capture" in reasons(run)["capture-1-20261122T000000"]
    assert load_run(capture).rank_ids == [0]


def test_nvml_source_column_is_not_a_metric(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (tmp_path / "nvml").mkdir()
    np.savez(tmp_path / "nvml" / "rank0.0.npz", ts_ns=np.array([BASE_NS]), gpu=np.array([0]),
             source=np.array([0], dtype=np.int8), power_w=np.array([300.0]))
    assert set(load_run(tmp_path).ranks[0].counters[S.METRIC].astype(str)) == {"power_w"}


def test_workers_are_limited_by_free_memory():
    from profkit.loader import memory_safe_workers

    gib = 1 << 30
    # 1 GiB traces need ~2.5 GiB each: 10 GiB free (7 usable) holds two at once.
    assert memory_safe_workers([gib, gib, gib, gib], wanted=8, free_bytes=10 * gib) == 2
    assert memory_safe_workers([gib], wanted=8, free_bytes=gib) == 1
    assert memory_safe_workers([1 << 20] * 4, wanted=4, free_bytes=10 * gib) == 4
