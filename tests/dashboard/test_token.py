"""A shared GPU node is not a private machine: `profkit dashboard` asks for a token by
default, as Jupyter does, and `--no-token` asks for none. Real servers on 127.0.0.1, real
HTTP: the pages, Dash's layout and callback endpoints and the merged-trace download are
refused (401) without the token and served with the printed address's cookie."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import pytest
from profkit.dashboard.server.registry import RunRegistry

from profkit.cli.serve import TOKEN_ENV
from tests.dashboard.conftest import REPO, free_port, wait_for
from tests.dashboard.test_hosts import RUN, UPDATE, download_body

PRINTED = "profkit dashboard: http://127.0.0.1:"


def request(port: int, method: str, path: str, headers=None, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = dict(headers or {})
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def start(tmp_path, *args):
    """``(process, port, printed line)`` of `profkit dashboard RUN ARGS` with no token in
    its environment, once its first line is printed."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", str(RUN), "--port",
                             str(port), *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=(tmp_path / "stderr.log").open("wb"), text=True)
    line = proc.stdout.readline()
    assert line.startswith(PRINTED), (line, (tmp_path / "stderr.log").read_text()[-2000:])
    return proc, port, line.split()[2]


def stop(proc):
    proc.terminate()
    proc.wait(timeout=10)


PAGES = ["/", f"/run/{RunRegistry([RUN], []).entries()[0].key}", "/_dash-layout",
         "/_dash-dependencies"]


def test_the_dashboard_asks_for_a_token_by_default(tmp_path):
    proc, port, url = start(tmp_path)
    try:
        token = parse_qs(urlsplit(url).query)["token"][0]
        assert len(token) >= 24 and url.endswith(f"/?token={token}")
        # the server answers (the token as a bearer header), then: nothing without it
        wait_for(f"http://127.0.0.1:{port}/_dash-layout", proc, tmp_path / "stderr.log",
                 token=token)
        for path in PAGES:
            status, _, body = request(port, "GET", path)
            assert status == 401 and b"_dash" not in body and b"token" in body, path
        status, _, body = request(port, "POST", UPDATE, body=download_body())
        assert status == 401 and b"tl-download" not in body and b"base64" not in body
        status, _, _ = request(port, "GET", "/?token=not-the-token-0123456789")
        assert status == 401
        # the printed address: a redirect without the token in it, and its cookie
        status, headers, _ = request(port, "GET", urlsplit(url).path + "?" + urlsplit(url).query)
        assert status == 303 and headers["Location"] == "/"
        cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
        for path in PAGES:
            status, _, body = request(port, "GET", path, cookie)
            assert status == 200, path
        status, _, body = request(port, "POST", UPDATE, cookie, download_body())
        assert status == 200, body[:300]
        data = json.loads(body)["response"]["tl-download"]["data"]
        assert data["filename"].endswith(".merged.json.gz") and data["base64"]
    finally:
        stop(proc)


def test_two_dashboards_get_different_tokens(tmp_path):
    tokens = []
    for _ in range(2):
        proc, _, url = start(tmp_path)
        stop(proc)
        tokens.append(parse_qs(urlsplit(url).query)["token"][0])
    assert tokens[0] != tokens[1]


def test_no_token_serves_everyone(tmp_path):
    proc, port, url = start(tmp_path, "--no-token")
    try:
        assert url == f"http://127.0.0.1:{port}/"
        wait_for(f"http://127.0.0.1:{port}/_dash-layout", proc, tmp_path / "stderr.log")
        for path in PAGES:
            assert request(port, "GET", path)[0] == 200, path
        status, _, body = request(port, "POST", UPDATE, body=download_body())
        assert status == 200 and b"tl-download" in body
    finally:
        stop(proc)


def test_no_token_and_a_token_together_are_a_usage_error(capsys):
    from profkit import cli

    with pytest.raises(SystemExit) as exc:
        cli.main(["dashboard", str(RUN), "--no-token", "--token", "x" * 20])
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err
