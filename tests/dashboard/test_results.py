"""The result cache of the dashboard: runs analysed in the background with the Runs table
filling in, analyses kept on disk across restarts (data, never pickle), run pages drawn
once per version of the run's files. Real sample runs, copied so nothing is written to
the repository."""

import os
import shutil
import time

import pytest
from profkit.dashboard.pages import runs as page_runs
from profkit.dashboard.server import loading
from profkit.dashboard.server import results as R
from profkit.dashboard.server.registry import RunRegistry

from tests.dashboard.conftest import REPO

SAMPLES = [REPO / "samples" / "runs" / "zoo" / name for name in ("compute", "host_sync")]


@pytest.fixture
def runs(tmp_path):
    copies = []
    for src in SAMPLES:
        copies.append(tmp_path / src.name)
        shutil.copytree(src, copies[-1], ignore=shutil.ignore_patterns(".profkit"))
    return copies


def wait_done(results, keys, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while any(results.state(k) not in (R.DONE, R.FAILED) for k in keys):
        assert time.monotonic() < deadline, {k: results.state(k) for k in keys}
        time.sleep(0.2)


def test_the_runs_table_fills_in_as_the_background_analyses_finish(runs):
    results = R.ResultCache(RunRegistry(runs, []), persist=False)
    keys = [e.key for e in results.registry.entries()]
    _, done, total, _ = page_runs.table(results)
    assert (done, total) == (0, 2) and [results.state(k) for k in keys] == ["", ""]
    results.prefetch(keys)
    assert all(results.state(k) in (R.QUEUED, R.ANALYSING, R.DONE) for k in keys)
    wait_done(results, keys)
    runs_table = page_runs.table(results)
    assert runs_table[1:3] == (2, 2)
    assert runs_table.progress == "all 2 runs analysed"
    assert [r["gpus"] for r in runs_table.rows] == ["1 x NVIDIA H200"] * 2


def test_a_row_is_done_only_with_its_results_even_when_the_analysis_ends_meanwhile(runs):
    """A run whose analysis ends while its row is drawn (seen in CI: the row said "done"
    with empty cells until the next poll, and a browser test read them) is drawn as still
    pending, never as done without its summary."""
    results = R.ResultCache(RunRegistry(runs, []), persist=False)
    keys = [e.key for e in results.registry.entries()]
    results.prefetch(keys)
    wait_done(results, keys)
    peek, looks = results.peek_summary, []

    def first_look_too_early(key):  # as if the analysis ended right after the first look
        looks.append(key)
        return None if looks.count(key) == 1 else peek(key)

    results.peek_summary = first_look_too_early
    rows = page_runs.table(results).rows
    assert [(r["state"], "gpus" in r) for r in rows] == [("", False)] * 2
    rows = page_runs.table(results).rows  # the next poll: both filled in
    assert [(r["state"], r["gpus"]) for r in rows] == [("done", "1 x NVIDIA H200")] * 2


def test_without_background_analysis_a_listed_run_waits_until_it_is_opened(runs):
    """``profkit dashboard --no-background``: the Runs page queues nothing; its rows say so
    and its polling stops; a run opened is analysed and its row filled in."""
    results = R.ResultCache(RunRegistry(runs, []), persist=False, background=False)
    keys = [e.key for e in results.registry.entries()]
    results.prefetch_listed(keys)  # what the Runs page does as it is drawn and polled
    time.sleep(0.5)
    assert [results.state(k) for k in keys] == ["", ""]
    runs_table = page_runs.table(results)
    assert runs_table[1:] == (0, 2, 2) and runs_table.settled
    assert [r["verdict"] for r in runs_table.rows] == [page_runs.UNASKED] * 2
    results.shown(keys[0])  # the run's page opened
    runs_table = page_runs.table(results)
    assert runs_table[1:] == (1, 2, 1) and runs_table.settled
    assert runs_table.progress.startswith("1 of 2 runs analysed; the others")
    with_background = R.ResultCache(RunRegistry(runs, []), persist=False)
    with_background.prefetch_listed(keys)
    assert not page_runs.table(with_background).settled
    wait_done(with_background, keys)


def test_more_runs_than_the_cache_holds_are_each_analysed_once(runs, tmp_path, monkeypatch):
    """Three runs, room for two analyses in memory: the Runs table still completes (each
    row keeps its small summary), and asking again analyses nothing again (it used to
    analyse the evicted runs again and again, never reaching "all runs analysed")."""
    third = tmp_path / "compute-copy"
    shutil.copytree(runs[0], third)
    results = R.ResultCache(RunRegistry([*runs, third], []), max_items=2, persist=False)
    keys = [e.key for e in results.registry.entries()]
    shows = []
    real_show = loading.show
    monkeypatch.setattr(loading, "show", lambda path: shows.append(path) or real_show(path))
    results.prefetch(keys)
    wait_done(results, keys)
    rows, done, total, _ = page_runs.table(results)
    assert (done, total) == (3, 3) and len(shows) == 3
    results.prefetch(keys)  # what the page's poll does
    assert page_runs.table(results)[1:3] == (3, 3) and len(shows) == 3
    assert [r["gpus"] for r in rows] == ["1 x NVIDIA H200"] * 3


def test_a_restarted_dashboard_shows_a_run_without_reading_its_traces(runs, monkeypatch):
    first = R.ResultCache(RunRegistry(runs[:1], []))
    key = first.registry.entries()[0].key
    verdict = first.analysis(key).verdict

    def no_reading(path):
        raise AssertionError(f"{path} was read again")

    monkeypatch.setattr(loading, "show", no_reading)
    again = R.ResultCache(RunRegistry(runs[:1], []))  # a new process, as far as memory goes
    assert again.analysis(key).verdict == verdict
    assert again.facts(key)["gpus"] == "1 x NVIDIA H200"


def test_a_kept_analysis_is_dropped_when_the_traces_change(runs):
    results = R.ResultCache(RunRegistry(runs[:1], []))
    key = results.registry.entries()[0].key
    before = results.analysis(key).run["ranks_analyzed"]
    (trace,) = (runs[0] / "traces").iterdir()
    trace.write_bytes(trace.read_bytes()[:100])  # now unreadable
    with pytest.raises(loading.RunReadError):
        R.ResultCache(RunRegistry(runs[:1], [])).analysis(key)
    assert before == [0]


def test_a_run_page_is_drawn_once_per_version_of_its_files(runs):
    results = R.ResultCache(RunRegistry(runs[:1], []), persist=False)
    key = results.registry.entries()[0].key
    drawn = []

    def draw():
        drawn.append(1)
        return object()

    first = results.page("kernels", key, draw)
    assert results.page("kernels", key, draw) is first and len(drawn) == 1
    assert results.page("comms", key, draw) is not first and len(drawn) == 2
    trace = next((runs[0] / "traces").iterdir())
    os.utime(trace, ns=(0, trace.stat().st_mtime_ns + 10**9))  # rewritten: another version
    results.page("kernels", key, draw)
    assert len(drawn) == 3


def test_the_runs_named_on_the_command_line_are_analysed_before_anyone_asks(runs):
    from profkit.dashboard.app import create_app, warm_up

    app = create_app(runs[:1], [])
    results = app.profkit_results
    (key,) = [e.key for e in results.registry.entries()]
    assert results.state(key) == ""
    warm_up(app, runs[:1])
    wait_done(results, [key])
    assert results.state(key) == R.DONE


def test_the_merged_trace_download_holds_no_trace_from_outside_the_run(tmp_path):
    import gzip
    import json

    from tests.factories import outside_link_run

    run, _ = outside_link_run(tmp_path)
    results = R.ResultCache(RunRegistry([run], []), persist=False)
    [key] = [e.key for e in results.registry.entries()]
    name, data = results.merged_trace(key)  # what the timeline's download button sends
    merged = json.loads(gzip.decompress(data))
    names = {e.get("name") for e in merged["traceEvents"]}
    assert "sm90_xmma_gemm_bf16bf16_bf16f32" in names and "someone_elses_kernel" not in names
    assert merged["profkit"]["ranks"] == [0]
