"""Serving: the token gate (a tiny WSGI app stands in for the dashboard: pure logic), then
`profkit dashboard --token` itself on waitress, quiet unless -v, and the warning when it
is bound beyond loopback with no token."""

import http.client
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from profkit.dashboard.server import serving

from profkit import cli
from tests.dashboard.conftest import REPO, free_port

TOKEN = "s3cret-token-0123456789"
RUN = REPO / "samples" / "runs" / "zoo" / "compute"


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def call(app, path="/", query="", headers=None):
    """(status, headers, body) of one request to the WSGI ``app``."""
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query,
               "SCRIPT_NAME": ""}
    environ.update({f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()})
    got = {}

    def start_response(status, hdrs, *_exc):
        got["status"], got["headers"] = status, dict(hdrs)

    body = b"".join(app(environ, start_response))
    return got["status"], got["headers"], body


@pytest.fixture
def gate():
    return serving.TokenGate(hello, TOKEN, port=8050)


@pytest.mark.parametrize("headers, query", [
    ({}, ""),  # nothing
    ({}, "token=wrong"),
    ({}, f"token={TOKEN[:-1]}"),  # a prefix of it
    ({}, f"token={TOKEN}x"),
    ({"Cookie": "profkit_token_8050=wrong"}, ""),
    ({"Cookie": f"profkit_token_9999={TOKEN}"}, ""),  # another port's cookie
    ({"Authorization": "Bearer wrong"}, ""),
    ({"Authorization": f"Basic {TOKEN}"}, ""),
    ({"Cookie": "\x00;;=="}, ""),  # unparsable
])
def test_requests_without_the_token_get_401(gate, headers, query):
    status, hdrs, body = call(gate, query=query, headers=headers)
    assert status.startswith("401") and b"hello" not in body
    assert "Set-Cookie" not in hdrs


def test_the_token_in_the_address_sets_a_cookie_and_drops_it_from_the_address(gate):
    status, hdrs, _ = call(gate, "/run/x", f"base=a&token={TOKEN}&new=b")
    assert status.startswith("303")
    assert hdrs["Location"] == "/run/x?base=a&new=b"
    assert hdrs["Set-Cookie"].startswith(f"profkit_token_8050={TOKEN};")
    assert "HttpOnly" in hdrs["Set-Cookie"] and "SameSite=Strict" in hdrs["Set-Cookie"]


@pytest.mark.parametrize("headers", [{"Cookie": f"other=1; profkit_token_8050={TOKEN}"},
                                     {"Authorization": f"Bearer {TOKEN}"}])
def test_the_cookie_or_a_bearer_header_lets_a_request_through(gate, headers):
    assert call(gate, headers=headers) == ("200 OK", {"Content-Type": "text/plain"}, b"hello")


def test_an_empty_token_is_refused():
    with pytest.raises(ValueError):
        serving.TokenGate(hello, "", port=1)


def test_the_access_log_logs_at_info_only(caplog):
    app = serving.AccessLog(hello)
    with caplog.at_level(logging.WARNING, logger="profkit.dashboard.server.serving"):
        call(app, "/quiet")
    assert "/quiet" not in caplog.text
    with caplog.at_level(logging.INFO, logger="profkit.dashboard.server.serving"):
        call(app, "/loud")
    assert "GET /loud 200 OK" in caplog.text


def request(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def start(tmp_path, *args) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "profkit", *args, "dashboard", str(RUN),
                                 "--port", str(port), "--token", TOKEN], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=log_file)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        try:
            request(port, "/_dash-layout", {"Authorization": f"Bearer {TOKEN}"})
            return proc, port, log_path
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise TimeoutError("the dashboard did not answer")


@pytest.mark.parametrize("verbose", [False, True])
def test_the_dashboard_on_waitress_asks_for_its_token(tmp_path, verbose):
    proc, port, log_path = start(tmp_path, *(["-v"] if verbose else []))
    try:
        status, hdrs, _ = request(port, "/")
        assert status == 401 and hdrs["Server"] == "profkit"  # waitress, named as we asked
        status, hdrs, _ = request(port, f"/?token={TOKEN}")
        assert status == 303 and hdrs["Location"] == "/"
        cookie = {"Cookie": hdrs["Set-Cookie"].split(";")[0]}
        status, _, body = request(port, "/", cookie)
        assert status == 200 and b"_dash-config" in body
        status, _, body = request(port, "/_dash-layout", cookie)  # the app itself answers
        assert status == 200 and b"_pages_location" in body
        assert request(port, "/_dash-layout")[0] == 401
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = log_path.read_text()
    assert ("GET /_dash-layout 200" in lines) == verbose  # one line per request with -v only
    assert "Running on" not in lines and "development server" not in lines  # not Flask's


def test_binding_beyond_loopback_without_a_token_warns(monkeypatch, caplog):
    served = {}
    monkeypatch.setattr(serving, "serve", lambda app, host, port, token, allowed=(),
                        meanwhile=None: served.update(host=host, token=token))
    monkeypatch.delenv("PROFKIT_DASHBOARD_TOKEN", raising=False)
    with caplog.at_level(logging.WARNING):
        assert cli.main(["dashboard", str(RUN), "--host", "0.0.0.0", "--no-token"]) == 0
    assert served == {"host": "0.0.0.0", "token": None}
    assert "no authentication" in caplog.text
    for token_args in ([], ["--token"]):  # a random token by default, as with --token alone
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert cli.main(["dashboard", str(RUN), "--host", "0.0.0.0", *token_args]) == 0
        assert len(served["token"]) >= 16 and "no authentication" not in caplog.text


def test_a_short_token_is_a_usage_error(capsys):
    assert cli.main(["dashboard", str(RUN), "--token", "short"]) != 0
    assert "at least 16 characters" in capsys.readouterr().err
