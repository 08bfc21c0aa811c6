"""The callback-request guard, in process: it knows every input of every server callback,
lets through what the renderer sends and refuses what it never sends."""

import pytest
from profkit.dashboard.app import create_app
from profkit.dashboard.server import guard


@pytest.fixture(scope="module")
def callback_map():
    app = create_app([], [])
    app.server.test_client().get("/")  # Dash adds its page router on the first request
    return app.callback_map


def renderer_body(output: str, entry: dict) -> dict:
    """The body the renderer sends for a callback, every input and state None."""
    outputs = entry["output"]
    as_dicts = [{"id": o.component_id, "property": o.component_property}
                for o in (outputs if isinstance(outputs, list) else [outputs])]
    return {"output": output, "outputs": as_dicts if isinstance(outputs, list) else as_dicts[0],
            "inputs": [dict(d, value=None) for d in entry["inputs"]],
            "state": [dict(d, value=None) for d in entry["state"]], "changedPropIds": []}


def test_every_server_callback_input_has_a_declared_type(callback_map):
    server = {k: v for k, v in callback_map.items() if "callback" in v}
    assert len(server) >= 10
    for entry in server.values():
        for d in entry["inputs"] + entry["state"]:
            assert (d["id"], d["property"]) in guard.PROP_TYPES, d


def test_the_renderers_requests_pass_and_altered_ones_are_refused(callback_map):
    output = "..tl-graph.figure...tl-info.children...tl-note.children...tl-window.data.."
    body = renderer_body(output, callback_map[output])
    body["inputs"][0]["value"] = [0]  # the ranks drawn
    assert guard.callback_problem(callback_map, body) is None
    altered = [
        {**body, "output": "_pages_dummy.children"},  # a clientside callback
        {**body, "outputs": body["outputs"][0]},  # one output for a callback with two
        {**body, "inputs": body["inputs"][::-1]},
        {**body, "state": []},
        {**body, "inputs": [dict(body["inputs"][0], value=["0"]), *body["inputs"][1:]]},
        {**body, "inputs": [dict(body["inputs"][0], value=[True]), *body["inputs"][1:]]},
        {**body, "inputs": [dict(body["inputs"][0], value=0), *body["inputs"][1:]]},
        {**body, "state": [dict(body["state"][0], value=["x"])]},
        {**body, "changedPropIds": [1]},
        [body], None,
    ]
    for bad in altered:
        assert guard.callback_problem(callback_map, bad) is not None, bad


@pytest.mark.parametrize("value, ok", [
    ("/run/x", True), ("run/x", False), ("", False), (["/"], False), (None, False),
    ("/" + "a" * guard.MAX_TEXT, False)])
def test_page_paths_are_strings_dash_can_route(value, ok):
    assert guard.PROP_TYPES[("_pages_location", "pathname")](value) is ok
