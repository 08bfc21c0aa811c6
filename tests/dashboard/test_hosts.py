"""DNS rebinding: the dashboard answers only its own host names and takes state-changing
requests only from its own pages. The rules (pure), then real HTTP requests against a real
`profkit dashboard` on 127.0.0.1 with no token: a page that rebinds its name to 127.0.0.1
sends its own name as Host (421), and posts with its own Origin (403)."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import subprocess
import sys

import pytest
from profkit.dashboard.server.hosts import AllowedHosts, allowed_names, split_host
from profkit.dashboard.server.registry import RunRegistry

from profkit import cli
from tests.dashboard.conftest import REPO, free_port, wait_for

RUN = REPO / "samples" / "runs" / "zoo" / "compute"
UPDATE = "/_dash-update-component"


@pytest.mark.parametrize("value, parsed", [
    ("127.0.0.1:8050", ("127.0.0.1", 8050)), ("LocalHost", ("localhost", None)),
    ("localhost.:80", ("localhost", 80)), ("[::1]:8050", ("::1", 8050)), ("::1", ("::1", None)),
    ("evil.example:8050", ("evil.example", 8050)),
    ("", None), ("a b", None), ("x:99999", None), ("x:y", None), ("[::1", None),
    ("[::1]x", None), ("evil.example/path", None), ("user@host", None),
])
def test_split_host(value, parsed):
    assert split_host(value) == parsed


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "127.8.9.10", "::1"])
def test_loopback_names_are_always_allowed(host):
    assert AllowedHosts.build("127.0.0.1", 8050).allows(host)


def test_other_names_need_to_be_allowed():
    local = AllowedHosts.build("127.0.0.1", 8050, ["dash.example"])
    assert local.allows("dash.example") and not local.allows("evil.example")
    assert not local.allows("10.0.0.5") and not local.allows("localhost.evil.example")
    bound = AllowedHosts.build("10.0.0.5", 8050)
    assert bound.allows("10.0.0.5") and not bound.allows("10.0.0.6")
    everywhere = AllowedHosts.build("0.0.0.0", 8050)  # any address; names still listed
    assert everywhere.allows("10.0.0.6") and not everywhere.allows("evil.example")


def test_origins():
    allowed = AllowedHosts.build("127.0.0.1", 8050, ["dash.example"])
    assert allowed.allows_origin("http://127.0.0.1:8050")
    assert allowed.allows_origin("http://localhost:8050")
    assert allowed.allows_origin("https://dash.example")  # behind a proxy
    for origin in ("http://evil.example", "http://evil.example:8050", "null", "",
                   "http://localhost:3000", "file://", "ftp://127.0.0.1:8050",
                   "http://127.0.0.1:99999"):
        assert not allowed.allows_origin(origin), origin


def test_allowed_names_from_options_and_environment():
    env = {"PROFKIT_DASHBOARD_ALLOWED_HOSTS": "a.example, B.example"}
    assert allowed_names(["c.example"], env) == ["c.example", "a.example", "b.example"]
    for bad in ("http://x.example", "x.example:80", "x/y"):
        with pytest.raises(ValueError, match="not a host name"):
            allowed_names([bad], {})


def test_a_bad_allowed_host_is_a_usage_error(capsys):
    assert cli.main(["dashboard", str(RUN), "--allowed-host", "http://x.example/"]) == 2
    assert "not a host name" in capsys.readouterr().err


# ---- a real server ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def port(tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("hosts") / "server.log"
    env = {**os.environ, "PROFKIT_DASHBOARD_ALLOWED_HOSTS": "team.example"}
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "profkit", "dashboard", str(RUN),
                                 "--port", str(port), "--allowed-host", "dash.example",
                                 "--no-token"],
                                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log_file)
    try:
        wait_for(f"http://127.0.0.1:{port}/", proc, log_path)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def request(port: int, method: str, path: str, host: str, origin: str | None = None,
            body: bytes | None = None) -> tuple[int, bytes]:
    """One request to 127.0.0.1:``port`` that names ``host`` (as a rebinding page's would)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Host": host}
    if origin is not None:
        headers["Origin"] = origin
    if body is not None:
        headers["Content-Type"] = "application/json"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def download_body() -> bytes:
    """The callback request of the timeline's "Download merged Perfetto trace" button."""
    (entry,) = RunRegistry([RUN], []).entries()
    return json.dumps({
        "output": "tl-download.data", "outputs": {"id": "tl-download", "property": "data"},
        "inputs": [{"id": "tl-download-btn", "property": "n_clicks", "value": 1}],
        "state": [{"id": "run-store", "property": "data", "value": {"run": entry.key}}],
        "changedPropIds": ["tl-download-btn.n_clicks"]}).encode()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1.evil.example",
                                  "localhost.evil.example:{port}", "", "a b"])
def test_a_forged_host_gets_421_before_dash(port, host):
    host = host.format(port=port)
    for path in ("/", "/_dash-layout", "/_dash-dependencies"):
        status, body = request(port, "GET", path, host)
        assert status == 421 and b"_pages_location" not in body and b"--allowed-host" in body
    status, body = request(port, "POST", UPDATE, host, f"http://{host}", download_body())
    assert status == 421 and b"tl-download" not in body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}",
                                  "127.5.6.7:{port}", "dash.example", "team.example:{port}"])
def test_own_names_are_answered(port, host):
    status, body = request(port, "GET", "/_dash-layout", host.format(port=port))
    assert status == 200 and b"_pages_location" in body


@pytest.mark.parametrize("origin", ["http://evil.example", "http://evil.example:{port}",
                                    "null", "http://localhost:1", "http://127.0.0.1.evil.example"])
def test_a_forged_origin_cannot_post(port, origin):
    status, body = request(port, "POST", UPDATE, f"127.0.0.1:{port}",
                           origin.format(port=port), download_body())
    assert status == 403 and b"tl-download" not in body


def test_the_own_page_downloads_the_trace(port):
    """The same callback from the dashboard's own page (and from a client that sends no
    Origin, like this one's first request) gets the merged trace: the check costs nothing."""
    for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}", None):
        host = f"{(origin or 'http://127.0.0.1').split('//')[1].split(':')[0]}:{port}"
        status, body = request(port, "POST", UPDATE, host, origin, download_body())
        assert status == 200, body[:300]
        data = json.loads(body)["response"]["tl-download"]["data"]
        assert data["filename"].endswith(".merged.json.gz") and data["base64"]
    import base64

    trace = json.loads(gzip.decompress(base64.b64decode(data["content"])))
    assert trace["traceEvents"]
