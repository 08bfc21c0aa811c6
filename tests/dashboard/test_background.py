"""The background analyses take runs in the order a page last asked for them: the Runs
page's first rows first, whatever was queued before."""

import threading
import time

import pytest
from profkit.dashboard.server import loading
from profkit.dashboard.server import results as R
from profkit.dashboard.server.background import ANALYSING, QUEUED, Background
from profkit.dashboard.server.registry import RunRegistry

from tests.dashboard.test_results import SAMPLES, runs, wait_done  # noqa: F401 (fixture)


def wait_for(condition, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_keys_are_worked_on_in_the_order_last_asked_for():
    done, gate = [], threading.Event()

    def work(key):
        gate.wait(10)  # the first key holds the only thread until the test lets it go
        done.append(key)

    bg = Background(work)
    assert bg.want(["a", "b", "c", "d"], workers=1) == ["a", "b", "c", "d"]
    wait_for(lambda: bg.state("a") == ANALYSING)
    assert [bg.state(k) for k in "bcd"] == [QUEUED] * 3
    # a page that shows d and c first: they go ahead of b; a, being worked on, is left alone
    assert bg.want(["d", "c", "a"], workers=1) == []
    assert bg.pending() == ["d", "c", "b"]
    gate.set()
    wait_for(lambda: len(done) == 4)
    assert done == ["a", "d", "c", "b"]
    assert [bg.state(k) for k in "abcd"] == [""] * 4


def test_a_failing_key_does_not_end_the_queue():
    done = []

    def work(key):
        if key == "bad":
            raise RuntimeError("broken")
        done.append(key)

    bg = Background(work)
    bg.want(["bad", "good"], workers=1)
    wait_for(lambda: done == ["good"])


def test_the_runs_are_analysed_in_the_order_the_page_shows_them(runs, monkeypatch):  # noqa: F811
    results = R.ResultCache(RunRegistry(runs, []), persist=False)
    shown_order = [e.key for e in results.registry.entries()][::-1]  # any order but the list's
    analysed = []
    real_show = loading.show

    def show(path):
        analysed.append(path)
        return real_show(path)

    monkeypatch.setattr(loading, "show", show)
    results.prefetch(shown_order)
    wait_done(results, shown_order)
    assert analysed == [results.entry(k).path for k in shown_order]


def test_the_runs_page_html_starts_the_analyses_before_its_scripts_ask_for_the_table(runs):  # noqa: F811
    from profkit.dashboard.app import create_app

    app = create_app([], [runs[0].parent])
    results = app.profkit_results
    keys = [e.key for e in results.registry.entries()]
    assert [results.state(k) for k in keys] == ["", ""]
    assert app.server.test_client().get("/run/not-a-run").status_code == 200
    assert [results.state(k) for k in keys] == ["", ""]  # another page: nothing started
    assert app.server.test_client().get("/").status_code == 200
    wait_done(results, keys)


@pytest.fixture
def forkserver(monkeypatch):
    """Pools start their workers from a forkserver, as under `profkit dashboard` (a worker
    forked straight from this threaded test process can deadlock)."""
    from profkit import children

    monkeypatch.setattr(children, "_start_method", ["forkserver"])


def test_small_runs_are_analysed_several_at_once_in_processes(tmp_path, monkeypatch, forkserver):
    """The Runs page analyses small runs in a bounded pool of processes, several at once
    (it used to take one run at a time, in the server's own process): with room for two,
    two runs are in the pool at the same moment, never more, and each row gets the verdict
    ``profkit analyze`` gives its run.

    The overlap is counted where a run enters and leaves the pool: the states of four rows
    read one after the other are not one moment (a run can end and the next begin between
    two reads, which once counted three)."""
    import shutil

    from profkit.analyzers.executor import analyze_run

    from tests.dashboard.conftest import REPO

    names = ("compute", "host_sync", "straggler", "balanced")
    copies = [shutil.copytree(REPO / "samples" / "runs" / "zoo" / n, tmp_path / n,
                              ignore=shutil.ignore_patterns(".profkit")) for n in names]
    in_server = []  # analyses made in this process (a worker records in its own copy)
    real_show = loading.show
    monkeypatch.setattr(loading, "show", lambda path: in_server.append(path) or real_show(path))
    results = R.ResultCache(RunRegistry(copies, []))
    results.background_threads = 2
    results._pool.workers = 2
    inside, most, lock = [0], [0], threading.Lock()
    real_analyse = results._pool.analyse

    def counted(path, disk_key):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            return real_analyse(path, disk_key)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(results._pool, "analyse", counted)
    keys = [e.key for e in results.registry.entries()]
    results.prefetch(keys)
    wait_done(results, keys, timeout_s=180)
    assert most[0] == 2 and in_server == []
    for key, path in zip(keys, copies):
        assert results.state(key) == R.DONE
        want = analyze_run(path, cache=False).verdict["primary"]
        assert results.peek_summary(key).verdict["primary"] == want


def test_a_run_named_at_start_is_analysed_beside_the_server_not_in_it(tmp_path, monkeypatch,
                                                                    forkserver):
    """``profkit dashboard RUN`` analyses RUN from the start while the server imports Dash
    and builds its pages: in a process of the run pool, so that the two do not take turns on
    one core (the GIL); the Overview then reads the analysis back (the same verdict as
    ``profkit analyze``)."""
    import shutil

    from profkit.analyzers.executor import analyze_run

    from tests.dashboard.conftest import REPO

    run = shutil.copytree(REPO / "samples" / "runs" / "stock_ddp", tmp_path / "stock_ddp",
                          ignore=shutil.ignore_patterns(".profkit"))
    in_server = []
    real_show = loading.show
    monkeypatch.setattr(loading, "show", lambda path: in_server.append(path) or real_show(path))
    results = R.ResultCache(RunRegistry([run], []))
    results.prefetch_named([run])
    (key,) = [e.key for e in results.registry.entries()]
    wait_done(results, [key])
    assert in_server == []
    assert results.analysis(key).verdict["primary"] == analyze_run(run, cache=False).verdict[
        "primary"]


def test_the_run_pool_outlives_the_thread_that_first_used_it(tmp_path, forkserver):
    """The background threads end whenever their queue is empty; the pool's workers must
    not end with them (a worker gets SIGKILL when the thread that started it ends: seen as
    BrokenProcessPool on the next run)."""
    import shutil

    from profkit.dashboard.server.runpool import RunPool

    from tests.dashboard.conftest import REPO

    copies = [shutil.copytree(REPO / "samples" / "runs" / "zoo" / "compute", tmp_path / n,
                            ignore=shutil.ignore_patterns(".profkit")) for n in ("a", "b")]
    pool = RunPool(1)
    first = threading.Thread(target=pool.analyse, args=(copies[0], "k" * 24))
    first.start()
    first.join()
    time.sleep(0.5)  # the parent-death signal, had the worker been the thread's
    assert pool.analyse(copies[1], "k" * 24) is None
    assert list((copies[1] / ".profkit").rglob("result-*"))  # kept for the server to read


def test_the_runs_page_poll_queues_the_rows_in_view_first(runs):  # noqa: F811
    """The Runs grid sends the keys of its rows as it shows them (sorted, filtered) with
    each poll; those runs are queued ahead of the others, in that order, and a key that
    names no run is dropped."""
    import json

    from profkit.dashboard.app import create_app

    app = create_app([], [runs[0].parent], background=True)
    results = app.profkit_results
    keys = [e.key for e in results.registry.entries()]
    asked = []
    results.prefetch_listed = asked.append
    view = [keys[-1], "not-a-run"]
    body = {"output": "..runs-grid.rowData...runs-progress.children...runs-poll.disabled..",
            "outputs": [{"id": "runs-grid", "property": "rowData"},
                        {"id": "runs-progress", "property": "children"},
                        {"id": "runs-poll", "property": "disabled"}],
            "inputs": [{"id": "runs-poll", "property": "n_intervals", "value": 1}],
            "state": [{"id": "runs-view", "property": "data", "value": view}],
            "changedPropIds": ["runs-poll.n_intervals"]}
    client = app.server.test_client()
    assert client.get("/").status_code == 200  # Dash's first request registers the pages
    answer = client.post("/_dash-update-component", data=json.dumps(body),
                         content_type="application/json")
    assert answer.status_code == 200, answer.data[:300]
    assert [keys[-1], *keys] in asked  # the row in view first, then every row
    rows = json.loads(answer.data)["response"]["runs-grid"]["rowData"]
    assert [r["key"] for r in rows] == keys
