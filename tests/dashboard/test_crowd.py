"""A crowd of expensive requests (timeline redraws) never makes the cheap ones wait: at most
:data:`~profkit.dashboard.server.busy.MAX_EXPENSIVE` are worked on at once, the others are
answered 429 with Retry-After, and a plain page answers in well under a second meanwhile."""

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
RUN = KEYS.get("stock_ddp_stack")  # the largest sample traces: the dearest redraw
pytestmark = pytest.mark.skipif(RUN is None, reason="the bundled sample runs are absent")
CROWD = 16
PLAIN_PAGE_S = 0.6  # the bound on a plain page's answer while the crowd is served (1.1 s without the bound)


def timeline_body(deps: list[dict], t0_ms: float) -> bytes:
    """The body the page sends when the timeline's ranks change (its redraw callback)."""
    dep = next(d for d in deps if "tl-graph.figure" in d["output"])
    values = {("tl-ranks", "value"): [1, 0], ("tl-cpu", "value"): ["cpu"],
              ("tl-zoom", "data"): None, ("run-store", "data"): {"run": RUN},
              ("tl-window", "data"): None}
    parts = [dict(zip(("id", "property"), p.rsplit(".", 1)))
             for p in dep["output"][2:-2].split("...")]
    body = {"output": dep["output"], "outputs": parts, "changedPropIds": ["tl-ranks.value"]}
    for part in ("inputs", "state"):
        body[part] = [{"id": d["id"], "property": d["property"],
                       "value": values[(d["id"], d["property"])]} for d in dep[part]]
    return json.dumps(body).encode()


def post(url: str, body: bytes) -> tuple[int, dict, float]:
    """(status, headers, seconds) of one callback request."""
    req = urllib.request.Request(url + "/_dash-update-component", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
            return resp.status, dict(resp.headers), time.monotonic() - start
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, dict(exc.headers), time.monotonic() - start


def get_seconds(url: str) -> float:
    start = time.monotonic()
    with urllib.request.urlopen(url, timeout=120) as resp:
        resp.read()
    return time.monotonic() - start


def test_a_crowd_of_timeline_redraws_leaves_a_plain_page_fast(server):
    with urllib.request.urlopen(server + "/_dash-dependencies", timeout=60) as resp:
        deps = json.load(resp)
    body = timeline_body(deps, 0.0)
    status, _, first_s = post(server, body)  # the run's analysis and lanes, read once
    assert status == 200
    answers: list[tuple[int, dict, float]] = []
    crowd = [threading.Thread(target=lambda: answers.append(post(server, body)))
             for _ in range(CROWD)]
    for t in crowd:
        t.start()
    time.sleep(0.3)  # the crowd is in
    plain_s = [get_seconds(server + "/") for _ in range(3)]
    for t in crowd:
        t.join(timeout=120)
    codes = sorted(code for code, _, _ in answers)
    print(f"one redraw {first_s:.2f} s; plain page with {CROWD} redraws in flight: "
          f"{', '.join(f'{s:.2f}' for s in plain_s)} s; answers {codes}; slowest redraw "
          f"{max(s for _, _, s in answers):.2f} s")
    assert max(plain_s) < PLAIN_PAGE_S
    assert len(answers) == CROWD and set(codes) <= {200, 429}
    assert codes.count(200) >= 2
    assert all(h.get("Retry-After", "").isdigit() for code, h, _ in answers if code == 429)
    assert post(server, body)[0] == 200  # every turn was given back
