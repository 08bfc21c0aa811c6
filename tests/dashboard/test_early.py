"""The first answers of `profkit dashboard` come before its pages and the analysis code are
loaded (server/early.py): the index page and the files it names are served by the shell
(create_shell), the layout and the callbacks wait until finish_app, and the index page then
is the one a complete app serves (issue 42, item 6: the first view)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

from tests.dashboard.conftest import REPO, STRAGGLER

SCRIPT = re.compile(r'<script src="([^"]+)"')
STYLESHEET = re.compile(r'<link rel="stylesheet" href="([^"]+)"')


def test_the_shell_loads_neither_pandas_nor_the_analysis_code_nor_the_pages():
    """In a fresh interpreter (what a test process has imported would hide it)."""
    code = ("import sys\n"
            "from profkit.dashboard.app import create_shell\n"
            "app = create_shell()\n"
            "page = app.server.test_client().get('/run/anything')\n"
            "assert page.status_code == 200, page.status_code\n"
            "heavy = ['pandas', 'profkit.analyzers.analyze', 'profkit.run.loader',\n"
            "         'profkit.dashboard.pages', 'profkit.dashboard.figures.charts']\n"
            "print(' '.join(m for m in heavy if m in sys.modules) or 'none')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "none"


def test_early_answers_then_the_held_requests_once_the_app_is_complete():
    from profkit.dashboard.app import create_app, create_shell, finish_app

    app = create_shell()
    client = app.server.test_client()
    early = client.get("/run/some-key", buffered=False)
    assert early.status_code == 200
    first = next(early.response).decode()  # what the browser has before the app is complete
    scripts = SCRIPT.findall(first)
    styles = STYLESHEET.findall(first)
    assert first.rstrip().endswith("</script>") and "new DashRenderer" not in first
    # the files it names are served now, an unknown one is a 404 as later
    renderer = next(s for s in scripts if "dash_renderer" in s)
    assert client.get(renderer).status_code == 200
    assert client.get("/assets/style.css").status_code == 200
    assert client.get("/_dash-component-suites/dash/nothing.js").status_code == 404
    # the layout waits for the pages
    answers = {}
    held = threading.Thread(target=lambda: answers.update(
        layout=client.get("/_dash-layout"), deps=app.server.test_client().get(
            "/_dash-dependencies")))
    held.start()
    time.sleep(0.5)
    assert held.is_alive() and not answers
    finish_app(app, [STRAGGLER], [])
    held.join(timeout=60)
    # the rest of that index page: the clientside callbacks' scripts (the Runs grid's, the
    # page router's), then the renderer, as in the index page of the complete app
    streamed = first + b"".join(early.response).decode()
    early.close()
    signed = re.compile(r'"end_id":"[^"]*"')  # a token Dash signs for each index page
    assert signed.sub("", streamed) == signed.sub("", client.get("/run/some-key").get_data(
        as_text=True))
    assert "dash_clientside" in streamed and "new DashRenderer" in streamed
    assert answers["layout"].status_code == 200 and b"_pages_content" in answers["layout"].data
    assert answers["deps"].status_code == 200 and b"overview-charts" in answers["deps"].data
    # the index page as the complete app serves it: the same scripts, each file once
    late = client.get("/run/some-key").get_data(as_text=True)
    assert SCRIPT.findall(late) == scripts
    assert STYLESHEET.findall(late) == styles
    assert sum("style.css" in s for s in styles) == 1
    assert sum("plotly_early.js" in s for s in scripts) == 1
    whole = create_app([STRAGGLER], []).server.test_client().get("/run/some-key")
    assert SCRIPT.findall(whole.get_data(as_text=True)) == scripts


def test_a_start_that_fails_answers_the_held_requests_with_why():
    from profkit.dashboard.app import create_shell

    app = create_shell()
    client = app.server.test_client()
    assert client.get("/").status_code == 200
    app.profkit_gate.failed("RuntimeError: no pages")
    answer = client.get("/_dash-layout")
    assert answer.status_code == 500
    assert b"could not start: RuntimeError: no pages" in answer.data
