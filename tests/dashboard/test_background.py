"""The background analyses take runs in the order a page last asked for them: the Runs
page's first rows first, whatever was queued before."""

import threading
import time

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
