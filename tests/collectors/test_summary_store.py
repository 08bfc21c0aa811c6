"""How ranks hand their in-job summaries to rank 0 through the job's key-value store: the
polling logic on a dict store with a fake clock, and real summaries of a bundled run
through a real torch TCPStore."""

from __future__ import annotations

import json
import os
import pickle
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
import torch.distributed as dist
from profkit.analyzers.executor import FileResult, plan_tasks, summarize_file
from profkit.collectors.in_job import store as kv
from profkit.collectors.in_job import summarize as job_summary

from profkit.run import loader

REPO = Path(__file__).resolve().parents[2]


class DictStore:
    """The four calls of a torch Store that the exchange uses, on a dict. ``arrive`` maps
    a number of sleeps to the values that appear in the store after that many."""

    def __init__(self, values=None, arrive=None):
        self.data = dict(values or {})
        self.arrive, self.sleeps, self.deleted = dict(arrive or {}), 0, []

    def set(self, key, value):
        self.data[key] = bytes(value)

    def check(self, keys):
        return all(k in self.data for k in keys)

    def get(self, key):
        return self.data[key]

    def delete_key(self, key):
        self.deleted.append(key)
        return self.data.pop(key, None) is not None

    def tick(self):
        self.sleeps += 1
        self.data.update(self.arrive.pop(self.sleeps, {}))


class Clock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self, store):
        self.now, self.slept, self.store = 100.0, [], store

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        self.store.tick()


def key(rank, run_id="r1"):
    return kv.summary_key(run_id, rank)


def collect(store, ranks, timeout_s, **kw):
    clock = Clock(store)
    return kv.collect(store, "r1", ranks, timeout_s, clock=clock, sleep=clock.sleep, **kw), clock


def test_values_failures_and_silence_are_told_apart():
    store = DictStore({key(1): b"PROFKIT-DATA/1\nx", key(2): kv.failed_value("ValueError: bad"),
                       key(3, "other-run"): b"of another run"})
    got, clock = collect(store, [1, 2, 3, 4], 2.0,
                         failed_on_disk=lambda r: "signal.SIGTERM: terminated" if r == 4 else None)
    assert got.values == {1: b"PROFKIT-DATA/1\nx"}
    assert got.failed == {2: "ValueError: bad", 4: "signal.SIGTERM: terminated"}
    assert got.missing == [3]  # another run's key is not this run's rank 3
    assert sorted(store.deleted) == [key(1), key(2)]  # read values free the store
    # rank 3 was waited for until the bound, and not longer
    assert sum(clock.slept) == pytest.approx(2.0) and clock.now == pytest.approx(102.0)


def test_the_wait_ends_as_soon_as_every_rank_answered():
    store = DictStore(arrive={3: {key(1): b"a"}, 5: {key(2): kv.failed_value("E: x")}})
    got, clock = collect(store, [1, 2], 60.0)
    assert got.values == {1: b"a"} and got.failed == {2: "E: x"} and got.missing == []
    assert len(clock.slept) == 5  # polled until the last answer, then stopped
    # the poll interval starts short and doubles up to MAX_POLL_S
    assert clock.slept == [0.02, 0.04, 0.08, 0.16, 0.32]


def test_no_ranks_to_wait_for_and_a_zero_bound_do_not_sleep():
    assert collect(DictStore(), [], 10.0)[1].slept == []
    got, clock = collect(DictStore(), [1, 2], 0.0)
    assert got.missing == [1, 2] and clock.slept == []


def test_failure_values_are_one_short_line():
    value = kv.failed_value("RuntimeError: " + "x\n" * 1000)
    assert value.startswith(b"failed: RuntimeError: x x ")
    assert len(value) == len(kv.FAILED) + kv.MAX_REASON_CHARS and value.endswith(b"...")
    assert kv.text_of(value, kv.FAILED).startswith("RuntimeError: x x")
    assert kv.text_of(value, kv.ERROR) is None


def test_large_values_go_in_parts_and_come_back_whole(monkeypatch):
    monkeypatch.setattr(kv, "PART_BYTES", 10)
    store = DictStore()
    value = bytes(range(95))
    kv.put(store, "r1", 1, value)
    assert store.data[key(1)] == b"parts: 10 95"
    assert [len(store.data[f"{key(1)}/{i}"]) for i in range(10)] == [10] * 9 + [5]
    got, _ = collect(store, [1], 1.0)
    assert got.values == {1: value} and store.data == {}  # the parts were deleted too


@pytest.mark.parametrize("header, problem", [
    (b"parts: 3 30", "parts missing"),
    (b"parts: x", "bad parts header"),
    (b"parts: 999999999 1", "999999999 parts"),
])
def test_broken_parts_become_an_error_value(header, problem):
    store = DictStore({key(1): header})
    got, _ = collect(store, [1], 1.0)
    assert kv.text_of(got.values[1], kv.ERROR).startswith(f"{key(1)}: {problem}")


def test_store_calls_are_bounded_inside_and_restored_after():
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=1800))
    with kv.bounded(server, 2.5):
        assert server.timeout == timedelta(seconds=2.5)
    assert server.timeout == timedelta(seconds=1800)
    with kv.bounded(server, 3600):  # never lengthened
        assert server.timeout == timedelta(seconds=1800)


@pytest.fixture(scope="module")
def bundled_results():
    """The map's real results for each rank of the bundled 2-rank DDP run."""
    root, folder, meta, files, _ = loader.open_run(REPO / "samples" / "runs" / "profkit_ddp")
    return [summarize_file(t) for t in plan_tasks(folder, meta, files, False, None)]


def test_real_summaries_cross_a_real_tcp_store(bundled_results, tmp_path, monkeypatch):
    """Two store clients as two ranks would hold them; one summary is sent in parts."""
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30))
    client = dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30))
    values = [job_summary.encoded(r) for r in bundled_results]
    assert all(20 * 2**10 < len(v) < 1 * 2**20 for v in values)  # ~90 KiB each
    kv.put(client, "run", 1, values[0])
    monkeypatch.setattr(kv, "PART_BYTES", 16 * 2**10)
    kv.put(client, "run", 2, values[1])
    kv.put(client, "run", 3, kv.failed_value("RuntimeError: boom"))
    got = kv.collect(server, "run", [1, 2, 3, 4], 0.5)
    assert got.values == {1: values[0], 2: values[1]}  # byte for byte, parts joined
    assert got.failed == {3: "RuntimeError: boom"} and got.missing == [4]
    for rank, result in zip((1, 2), bundled_results):
        back = job_summary.decoded(rank, got.values[rank], tmp_path)
        assert isinstance(back, FileResult) and back.error is None
        assert back.path == result.path and back.summary.rank == result.summary.rank
        assert back.summary.step_stats == result.summary.step_stats
        arrived, sent = back.summary.collectives[0], result.summary.collectives[0]
        # the same values and dtypes, but that strings arrive as Arrow's str (the map makes
        # them Python objects: profkit.strings)
        pd.testing.assert_frame_equal(arrived, sent, check_dtype=False,
                                      check_index_type=False, check_column_type=False)
        assert [object if isinstance(d, pd.StringDtype) else d for d in arrived.dtypes] == \
            list(sent.dtypes)
    assert not server.check([kv.summary_key("run", 1)])  # deleted once read


class Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_hostile_value_is_never_unpickled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for value in (pickle.dumps(Boom()), b"PROFKIT-DATA/1\n\x05", kv.error_value("no trace")):
        back = job_summary.decoded(3, value, tmp_path)
        assert isinstance(back, FileResult) and back.summary is None
        assert back.path == str(tmp_path / "traces" / "rank3.pt.trace.json.gz")
    assert back.error == "no trace"
    assert not (tmp_path / "pwned").exists()
    assert job_summary.decoded(3, pickle.dumps(Boom()), tmp_path).error == (
        "rank 3 sent an unreadable summary (not a profkit data blob (bad magic))")


def test_the_report_status_says_failed_before_incomplete():
    failed = kv.Arrivals(failed={2: "E: x"}, missing=[3])
    problems = job_summary.rank_problems(failed, 5)
    assert problems == {2: "failed: E: x",
                        3: "sent no summary within 5 s (still running, hung or killed)"}
    meta = job_summary.report_meta({"status": "ok", "world_size": 4}, failed, problems)
    assert meta["status"] == "failed" and meta["world_size"] == 4
    assert meta["rank_errors"] == {"2": "E: x", "3": problems[3]}
    silent = kv.Arrivals(missing=[3])
    assert job_summary.report_meta({"status": "ok"}, silent, {})["status"] == "incomplete"
    assert job_summary.report_meta({}, kv.Arrivals(), {})["rank_errors"] == {}


def test_a_failed_status_on_disk_counts_only_for_this_run(tmp_path):
    (tmp_path / "ranks").mkdir()
    status = {"rank": 1, "status": "failed", "run_id": "r1",
              "error": {"type": "signal.SIGTERM", "message": "terminated by SIGTERM (15)"}}
    (tmp_path / "ranks" / "rank1.json").write_text(json.dumps(status))
    (tmp_path / "ranks" / "rank2.json").write_text(json.dumps({**status, "run_id": "old"}))
    (tmp_path / "ranks" / "rank3.json").write_text(json.dumps({**status, "status": "ok"}))
    (tmp_path / "ranks" / "rank4.json").write_text("{trunc")
    found = {r: job_summary.failed_on_disk(tmp_path, "r1", r) for r in range(1, 6)}
    assert found == {1: "signal.SIGTERM: terminated by SIGTERM (15)", 2: None, 3: None,
                     4: None, 5: None}
