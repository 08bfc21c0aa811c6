"""Hostile requests against the real server: crafted payloads for every callback the app
declares and path-traversal GETs get a 4xx (or Dash's 204 no-op), never a 500, never a file
outside the app, and leave no traceback in the server log."""

import http.client
import json

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
STOCK = KEYS.get("stock_ddp")
pytestmark = pytest.mark.skipif(STOCK is None, reason="the bundled sample runs are absent")
UPDATE = "/_dash-update-component"

# A value the page itself would send for every callback input and state; the test attacks
# one slot at a time and keeps these in the others, so the bad value is what reaches the
# callback. A callback input missing here fails the test: add it when adding a callback.
VALID = {
    ("_pages_location", "pathname"): "/compare",
    ("_pages_location", "search"): f"?base={STOCK}&new={KEYS.get('zoo/straggler')}",
    ("_pages_store", "data"): {"title": "profkit"},
    ("runs-poll", "n_intervals"): 3,
    ("runs-view", "data"): [STOCK, "not-a-run"],  # the grid's rows in view (keys)
    ("runs-grid", "virtualRowData"): [{"key": STOCK}],  # the grid's rows (a clientside callback)
    ("tables-body", "children"): [],  # the Tables page's scroll (a clientside callback)
    ("url", "hash"): "#table-stragglers",
    ("rank-bars", "clickData"): {"points": [{"x": "rank 1", "y": 3.0}]},
    ("step-heatmap", "clickData"): {"points": [{"x": "step 3", "y": "rank 0", "z": 1.0}]},
    ("selected-rank", "data"): 0,
    ("overview-charts", "data"): {"run": STOCK},
    ("run-store", "data"): {"run": STOCK},
    ("tl-ranks", "value"): [1, 0],
    ("tl-cpu", "value"): ["cpu"],
    ("tl-search", "value"): "nccl",
    ("tl-window", "data"): [10.0, 12.0],
    ("tl-graph", "relayoutData"): {"xaxis.range[0]": 10.0, "xaxis.range[1]": 12.0},
    ("tl-zoom", "data"): {"xaxis.range[0]": 10.0, "xaxis.range[1]": 12.0},
    ("tl-graph", "clickData"): {"points": [{"customdata": [0, "gpu", 3], "x": 1.0}]},
    ("tl-download-btn", "n_clicks"): 1,
    ("k-class", "value"): "compute",
    ("c-waits", "clickData"): {"points": [{"customdata": "no-such-collective"}]},
    ("n-metrics", "value"): ["power_w"],
    ("cmp-base", "value"): STOCK,
    ("cmp-new", "value"): KEYS.get("zoo/straggler"),
}
DEEP = [[[[[[[[[["deep"]]]]]]]]]]
HOSTILE = [
    None, True, False, -1, 0, 99, 2**31, 10**30, -(10**30), 1.5, 1e308, float("nan"),
    float("inf"), "", "x", "not-a-run", "../../../../etc/passwd", "rank 99", "a" * 20000,
    "?results=1&run_key=x&base=a&base=b",
    [], [None], ["x"], [1, 2], [STOCK, STOCK], DEEP, {}, {"run": None}, {"run": 99},
    {"run": ["x"]}, {"run": "../../etc/passwd"}, {"run": STOCK, "extra": DEEP},
    {"points": "x"}, {"points": [1]}, {"points": [[]]}, {"points": [{"x": ["rank 1"]}]},
    {"points": [{"x": "rank 99"}]}, {"points": [{"y": "rank " + "9" * 5000}]},
    {"points": [{"customdata": ["x"]}]}, {"points": [{"customdata": {"a": 1}}]},
    {"points": [{"customdata": [0, "gpu", 10**12]}]}, {"points": [{"customdata": [99, "cpu", 0]}]},
    {"points": [{"customdata": [0, "../x", -1]}]}, {"points": [{"customdata": 0.5, "x": "a"}]},
    {"points": [{"text": "<b>" * 5000}]},
    {"xaxis.range[0]": "nan", "xaxis.range[1]": "inf"},
    {"xaxis.range[0]": -1e308, "xaxis.range[1]": 1e308},
    {"xaxis.range[0]": 5.0, "xaxis.range[1]": 1.0}, {"xaxis.range[0]": [1], "xaxis.range[1]": {}},
    {"xaxis.autorange": "yes"},
]
# Envelopes Dash itself would choke on (the callback named is a real one).
ENVELOPES = [
    b"", b"null", b"[]", b'"x"', b"{", b"[" * 200_000, b"{}", b'{"output": 3}',
    b'{"output": "nope.children", "inputs": []}', b'{"output": ["x"], "inputs": []}',
    b'{"output": "_pages_dummy.children", "inputs": [{"id": "_pages_store", "property": "data"}]}',
    b'{"output": "n-graph.figure", "outputs": {"id": "n-graph", "property": "figure"}}',
    b'{"output": "n-graph.figure", "inputs": "x", "state": "y"}',
    b'{"output": "n-graph.figure", "inputs": [1], "state": [2]}',
    b'{"output": "n-graph.figure", "inputs": [{"id": "n-metrics"}], "state": []}',
    b'{"output": "n-graph.figure", "outputs": "x", "inputs": [{"id": "n-metrics", "property":'
    b' "value", "value": []}], "state": [{"id": "run-store", "property": "data"}]}',
    b'{"output": "n-graph.figure", "outputs": {"id": "n-graph", "property": "figure"},'
    b' "inputs": [{"id": "k-class", "property": "value", "value": "all"}],'
    b' "state": [{"id": "run-store", "property": "data", "value": {}}]}',
    b'{"output": "n-graph.figure", "outputs": {"id": "n-graph", "property": "figure"},'
    b' "inputs": [{"id": "n-metrics", "property": "value", "value": []}],'
    b' "state": [{"id": "run-store", "property": "data", "value": {}}], "changedPropIds": 5}',
]
TRAVERSALS = [
    "/_dash-component-suites/dash/../../../../etc/passwd",
    "/_dash-component-suites/dash/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/_dash-component-suites/dash/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/_dash-component-suites/dash/%2e%2e%2f%2e%2e%2f%2e%2e%2fpyproject.toml",
    "/_dash-component-suites/%2e%2e/%2e%2e/etc/passwd",
    "/_dash-component-suites/dash//etc/passwd",
    "/_dash-component-suites/dash/%2Fetc%2Fpasswd",
    "/_dash-component-suites/dash/dcc/../../../../../../etc/passwd",
    "/_dash-component-suites/plotly/../../../../../../etc/passwd",
    "/_dash-component-suites/os/path.py",
    "/_dash-component-suites/profkit/dashboard/app.py",
    "/_dash-component-suites/no-such-package/x.js",
    "/_dash-component-suites/dash/deps/no-such-file.js",
    "/_dash-component-suites/dash/dcc/dash_core_components.v9_9_9m1.js.map.nope",
]
OTHER_GETS = ["/assets/../../pyproject.toml", "/assets/%2e%2e/%2e%2e/pyproject.toml",
              "/_reload-hash", "/_favicon.ico", "/_dash-layout", "/_dash-dependencies",
              "/static/../../etc/passwd", "/run/%00", "/compare?base=a&base=b&results=1",
              "/run/x?results=1&run_key=y"]


def request(server: str, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One raw HTTP request; the path is sent as written, not normalised."""
    host, port = server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def outputs_of(output: str) -> list[dict] | dict:
    """The ``outputs`` field the renderer sends for a callback's ``output`` string."""
    if output.startswith(".."):
        parts = output[2:-2].split("...")
        return [dict(zip(("id", "property"), p.rsplit(".", 1))) for p in parts]
    return dict(zip(("id", "property"), output.rsplit(".", 1)))


def payload(dep: dict, slot: tuple[str, int] | None = None, value=None) -> bytes:
    """The body the renderer would send for ``dep``, with ``value`` in ``slot``."""
    body = {"output": dep["output"], "outputs": outputs_of(dep["output"]), "changedPropIds": []}
    for part in ("inputs", "state"):
        body[part] = []
        for i, d in enumerate(dep[part]):
            v = value if slot == (part, i) else VALID[(d["id"], d["property"])]
            body[part].append({"id": d["id"], "property": d["property"], "value": v})
    trigger = body["inputs"][slot[1] if slot and slot[0] == "inputs" else 0]
    body["changedPropIds"] = [f"{trigger['id']}.{trigger['property']}"]
    return json.dumps(body).encode()


@pytest.fixture
def fresh_log(server, server_log):
    """The server log written during the test."""
    start = server_log.stat().st_size
    return lambda: server_log.read_bytes()[start:].decode(errors="replace")


def test_every_callback_declares_valid_inputs_here(server):
    status, deps = request(server, "GET", "/_dash-dependencies")
    assert status == 200
    needed = {(d["id"], d["property"]) for dep in json.loads(deps) for d in dep["inputs"] + dep["state"]}
    assert needed <= set(VALID), f"add a valid value for {needed - set(VALID)}"


def test_crafted_callback_payloads_get_4xx_or_no_update(server, fresh_log):
    deps = json.loads(request(server, "GET", "/_dash-dependencies")[1])
    answers: dict[int, int] = {}
    for dep in deps:
        slots = [(part, i) for part in ("inputs", "state") for i in range(len(dep[part]))]
        for slot in slots:
            for value in HOSTILE:
                status, body = request(server, "POST", UPDATE, payload(dep, slot, value))
                answers[status] = answers.get(status, 0) + 1
                assert status < 500, f"{dep['output']} {slot} = {str(value)[:80]}: {status}"
                assert b"Traceback" not in body and b"root:x:" not in body
    for body in ENVELOPES:
        status, _ = request(server, "POST", UPDATE, body)
        assert 400 <= status < 500, f"{body[:120]!r}: {status}"
    log = fresh_log()
    assert "Traceback" not in log, log[-3000:]
    assert '" 500 ' not in log
    # refused or stopped by the checks, not caught by a panel's error boundary
    assert "could not be drawn" not in log, log[-3000:]
    assert answers.get(400, 0) > 0 and answers.get(204, 0) > 0


def test_traversal_and_unknown_component_suites_are_404(server, fresh_log):
    for path in TRAVERSALS:
        status, body = request(server, "GET", path)
        assert status == 404, f"{path}: {status}"
        assert b"root:x:" not in body and b"[project]" not in body and b"import" not in body
    for path in OTHER_GETS:
        status, body = request(server, "GET", path)
        assert status < 500, f"{path}: {status}"
        assert b"root:x:" not in body and b"[project]" not in body
    log = fresh_log()
    assert "Traceback" not in log, log[-3000:]


def test_real_component_suite_files_are_still_served(server):
    index = request(server, "GET", "/")[1].decode()
    scripts = [s.split('"')[0] for s in index.split('src="')[1:] if "_dash-component-suites" in s]
    assert scripts
    for src in scripts[:3]:
        assert request(server, "GET", src)[0] == 200, src
