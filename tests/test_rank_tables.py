"""The rank tables declared in schema.RANK_TABLES: every stage of loading (ingest, cache,
the join of a rank's profiler cycles, the clock alignment) follows the declarations, and the
counters table holds the trace's own counter samples beside NVML's."""

import json

import numpy as np
import pandas as pd
import pytest

from profkit import schema as S
from profkit.model import TABLE_ATTRIBUTES, RankData, empty_frame
from profkit.run import counters as nvml
from profkit.run import loader
from profkit.run.loader import align_clock, load_run
from profkit.trace import tracefile
from profkit.trace.ingest import build_tables
from tests.factories import BASE_NS, counter, instant, trace_doc, two_step_events, write_trace

OFFSET = 250_000  # ns, rank 1's clock ahead of rank 0's

# Counter events of the traces below: GPU 0's (pid 0, where its kernels are) and the
# process's (pid 100: no GPU), at 10, 20 and 30 us past the trace's base time.
COUNTERS = [
    counter("GPU Memory", 10.0, pid=0, allocated=2048, reserved=4096),
    counter("GPU Memory", 20.0, pid=0, allocated=1024, reserved=4096),
    counter("Host Memory", 30.0, pid=100, rss=7.5),
]


def with_counters(rank=0):
    """The two-step trace of ``rank`` with :data:`COUNTERS` and a [memory] instant event."""
    events = two_step_events(rank) + COUNTERS
    events.append(instant("[memory]", 15.0, **{"Bytes": 512, "Total Allocated": 2560}))
    return trace_doc(rank=rank, world_size=2, events=events)


def known_frame(table: S.RankTable) -> pd.DataFrame:
    """Three rows of ``table``'s columns: each time column 1000, 2000, and -1 (absent where
    the column is optional, else a time before the epoch); every other column 0, 1, 2."""
    return pd.DataFrame({c: np.array([1000, 2000, -1] if c in table.time_columns else [0, 1, 2],
                                     dtype=np.int64) for c in table.columns})


def test_the_declared_tables_name_their_columns():
    names = [t.name for t in S.RANK_TABLES]
    assert names == ["events", "collectives", "steps", "counters", "memory"]
    for t in S.RANK_TABLES:
        # every epoch-ns column is declared a time column (a duration is no time)
        times = {c for c in t.columns if c.endswith("_ns") and c != S.DUR_NS}
        assert set(t.time_columns) == times, t.name
        assert set(t.optional_times) <= set(t.time_columns)
        assert t.step_column is None or t.step_column in t.columns


def test_every_time_column_of_every_table_is_shifted():
    tables = {t.name: known_frame(t) for t in S.RANK_TABLES}
    own = {name: tables.pop(name) for name in TABLE_ATTRIBUTES}  # the others: RankData.more
    data = RankData(0, "rank0", **own, more=tables)
    align_clock(data, OFFSET)
    for t in S.RANK_TABLES:
        got = data.table(t.name)
        for col in t.columns:
            before = known_frame(t)[col].to_numpy()
            if col not in t.time_columns:
                want = before
            elif col in t.optional_times:  # -1: absent, stays -1
                want = np.where(before < 0, before, before - OFFSET)
            else:
                want = before - OFFSET
            assert got[col].tolist() == want.tolist(), f"{t.name}.{col}"


def test_a_declared_table_is_joined_and_aligned_like_the_events(tmp_path, monkeypatch):
    """A table only declared (no RankData attribute, no loader code of its own) comes
    through the join of two profiler cycles and the clock alignment like the events."""
    marks = S.RankTable("marks", (S.TS_NS, "end_ns", S.STEP), (S.TS_NS, "end_ns"),
                        ("end_ns",))
    cycles = []
    for i in range(2):  # two separate sessions: both count their steps 1, 2
        path = write_trace(tmp_path / f"rank0.{i}.json", trace_doc(
            rank=0, base_ns=BASE_NS + i * 10**9))
        cycles.append(loader.ingest_file(str(path), use_cache=False))
    # declared from here on (ingest would refuse a declared table it does not build)
    monkeypatch.setattr(S, "RANK_TABLES", S.RANK_TABLES + (marks,))
    for res in cycles:
        first = res.tables["events"][S.TS_NS].iloc[0]
        res.tables["marks"] = pd.DataFrame({S.TS_NS: [first], "end_ns": [-1], S.STEP: [1]})
    data = loader.rank_data(cycles, 0, "test")
    events_before = data.events[S.TS_NS].to_numpy().copy()
    assert data.table("marks")[S.STEP].tolist() == [1, 3]  # renumbered like the steps
    assert data.table("marks")[S.TS_NS].isin(events_before).all()
    align_clock(data, OFFSET)
    assert (data.events[S.TS_NS].to_numpy() == events_before - OFFSET).all()
    assert data.table("marks")[S.TS_NS].isin(data.events[S.TS_NS]).all()
    assert data.table("marks")["end_ns"].tolist() == [-1, -1]  # absent: not shifted


def test_a_traces_counter_samples_are_read(tmp_path):
    path = write_trace(tmp_path / "rank0.json", with_counters())
    tables = build_tables(tracefile.load(path)).frames
    c = tables["counters"]
    assert list(c.columns) == list(S.COUNTER_COLUMNS)
    assert c[S.METRIC].astype(str).tolist() == [
        "trace:GPU Memory/allocated", "trace:GPU Memory/allocated",
        "trace:GPU Memory/reserved", "trace:GPU Memory/reserved", "trace:Host Memory/rss"]
    assert c[S.TS_NS].tolist() == [BASE_NS + 10_000, BASE_NS + 20_000, BASE_NS + 10_000,
                                   BASE_NS + 20_000, BASE_NS + 30_000]
    assert c[S.VALUE].tolist() == [2048.0, 1024.0, 4096.0, 4096.0, 7.5]
    assert c[S.DEVICE].tolist() == [0, 0, 0, 0, -1]  # pid 0 holds GPU 0's kernels
    # the instant event is neither an event nor a counter sample
    assert "[memory]" not in set(tables["events"][S.NAME].astype(str))


def test_counter_samples_without_a_number_are_dropped_and_counted(tmp_path):
    events = two_step_events() + [
        counter("c", 10.0, good=1, big=1e300, text="high", nothing=None, flag=True),
        {"ph": "C", "name": "c", "ts": "soon", "pid": 0, "args": {"good": 2}},
        {"ph": "C", "name": "c", "ts": 12.0, "pid": 0, "args": [1, 2]}]  # no series at all
    trace = tracefile.load(write_trace(tmp_path / "rank0.json", trace_doc(events=events)))
    c = build_tables(trace).frames["counters"]
    assert c[S.METRIC].astype(str).tolist() == ["trace:c/big", "trace:c/good"]
    assert any("4 counter samples dropped" in p for p in trace.all_problems())


def write_run(folder, rank_docs: dict, offsets: dict | None = None):
    """A profkit run directory: each rank's trace, NVML samples of GPU 0 at 5 and 25 us past
    BASE_NS (sm_clock_mhz), and run.json with the clock offsets."""
    for rank, doc in rank_docs.items():
        write_trace(folder / "traces" / f"rank{rank}.pt.trace.json.gz", doc)
        (folder / "nvml").mkdir(parents=True, exist_ok=True)
        np.savez(folder / "nvml" / f"rank{rank}.0.npz",
                 ts_ns=np.array([BASE_NS + 5_000, BASE_NS + 25_000]), gpu=np.array([0, 0]),
                 sm_clock_mhz=np.array([1980.0, 1755.0]))
    (folder / "run.json").write_text(json.dumps({
        "schema": "profkit.run/1", "world_size": len(rank_docs), "status": "ok",
        "clock_offsets_ns": offsets or {str(r): 0 for r in rank_docs}}))
    return folder


@pytest.mark.parametrize("cached", [False, True])
def test_trace_counters_survive_loading_beside_nvml(tmp_path, cached):
    run_dir = write_run(tmp_path / "run", {0: with_counters(0), 1: with_counters(1)},
                        {"0": 0, "1": OFFSET})
    if cached:
        load_run(run_dir)  # fills the cache, read by the load below
    run = load_run(run_dir, cache=cached)
    for rank, shift in ((0, 0), (1, OFFSET)):
        c = run.ranks[rank].counters
        metrics = c[S.METRIC].astype(str)
        assert metrics.tolist()[:2] == ["sm_clock_mhz"] * 2  # NVML's rows first
        assert c[S.TS_NS][metrics == "sm_clock_mhz"].tolist() == [
            BASE_NS + 5_000 - shift, BASE_NS + 25_000 - shift]
        assert c[S.TS_NS][metrics == "trace:Host Memory/rss"].tolist() == [
            BASE_NS + 30_000 - shift]
        assert len(c) == 2 + 5
        only = nvml.nvml_samples(c)
        assert only[S.METRIC].astype(str).tolist() == ["sm_clock_mhz"] * 2
        assert list(only[S.METRIC].cat.categories) == ["sm_clock_mhz"]


def test_nvml_samples_of_a_table_without_trace_counters_is_the_table():
    nvml_only = pd.DataFrame({S.TS_NS: [1, 2], S.DEVICE: [0, 0], S.METRIC: ["power_w"] * 2,
                              S.VALUE: [1.0, 2.0]}).astype({S.METRIC: "category"})
    assert nvml.nvml_samples(nvml_only) is nvml_only
    assert nvml.with_nvml(empty_frame(S.COUNTER_COLUMNS), nvml_only) is nvml_only
    trace_only = nvml_only.assign(**{S.METRIC: pd.Categorical(["trace:x/y"] * 2)})
    assert nvml.nvml_samples(trace_only).empty


def test_merge_writes_each_trace_counter_once(tmp_path):
    """merge copies the trace's 'C' events as they are and adds NVML's samples: a trace
    counter read into the counters table must not be written a second time."""
    import gzip

    from profkit.timeline.merge import merge_run

    run_dir = write_run(tmp_path / "run", {0: with_counters(0)})
    merge_run(load_run(run_dir), tmp_path / "m.json.gz")
    events = json.loads(gzip.decompress((tmp_path / "m.json.gz").read_bytes()))["traceEvents"]
    names = [e["name"] for e in events if e["ph"] == "C"]
    assert sorted(names) == ["GPU Memory", "GPU Memory", "Host Memory", "sm_clock_mhz",
                             "sm_clock_mhz"]


def test_nvml_measures_read_only_nvml_samples(tmp_path):
    """The NVML table of a run is the same with or without the trace's counters, and a run
    with only trace counters has none (its counters are no clock, power or memory reading)."""
    from profkit.analyzers.measure.efficiency import analyze_efficiency

    plain = trace_doc(rank=0, world_size=1)
    counted = {**with_counters(0), "distributedInfo": plain["distributedInfo"]}

    def nvml_table(folder, doc, with_nvml=True):
        write_run(folder, {0: doc})
        if not with_nvml:
            for chunk in (folder / "nvml").iterdir():
                chunk.unlink()
        return analyze_efficiency(load_run(folder, cache=False)).tables["nvml"]

    want = nvml_table(tmp_path / "plain", plain)
    assert len(want) == 1 and want["clock_samples"].iloc[0] > 0
    pd.testing.assert_frame_equal(nvml_table(tmp_path / "counted", counted), want)
    assert nvml_table(tmp_path / "trace_only", counted, with_nvml=False).empty
