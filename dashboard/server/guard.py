"""Requests the renderer would never send get a 4xx before Dash sees them.

Dash trusts the body of ``/_dash-update-component``: a callback it does not know, inputs
that are not the callback's, or a list where a string belongs end as a 500 and a traceback.
Every callback request is checked here against the app's own callback map, and each input
and state value against the type declared for it in :data:`PROP_TYPES` (a property without
a declared type is refused, so a new callback input must be declared). The callbacks then
check what only they can: known run keys, known ranks, sane ranges. A component-suite path
that names no registered file is a 404, not Dash's 500.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from dash.exceptions import DependencyException
from flask import jsonify, request
from profkit.dashboard import ids

log = logging.getLogger(__name__)
MAX_TEXT = 4096  # characters of a string input: run keys, class names, paths, queries
MAX_ITEMS = 256  # items of a list input: run keys, metric names
MAX_INT = 2**53  # beyond this a JSON number is no longer an exact integer in the browser
UPDATE_PATH = "_dash-update-component"
SUITES_PATH = "_dash-component-suites/"


def _text(value) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < MAX_INT


def _path(value) -> bool:
    """A page path as the browser's location gives it (Dash refuses any other)."""
    return _text(value) and value.startswith("/")


def _dict(value) -> bool:
    return isinstance(value, dict)


def _texts(value) -> bool:
    return isinstance(value, list) and len(value) <= MAX_ITEMS and all(map(_text, value))


def _ints(value) -> bool:
    return isinstance(value, list) and len(value) <= MAX_ITEMS and all(map(_int, value))


def _window(value) -> bool:
    """[t0, t1]: two finite numbers (ms)."""
    return isinstance(value, list) and len(value) == 2 and finite(*value)


def _optional(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or check(value)


# (component id, property) -> the values a callback may receive for it. The ids of Dash's
# page router (``_pages_location``, ``_pages_store``) are Dash's own.
PROP_TYPES: dict[tuple[str, str], Callable[[object], bool]] = {
    ("_pages_location", "pathname"): _path,
    ("_pages_location", "search"): _optional(_text),
    (ids.RUNS_POLL, "n_intervals"): _optional(_int),
    (ids.RUNS_VIEW, "data"): _optional(_texts),
    (ids.RANK_BARS, "clickData"): _optional(_dict),
    (ids.STEP_HEATMAP, "clickData"): _optional(_dict),
    (ids.SELECTED_RANK, "data"): _optional(_int),
    (ids.OVERVIEW_CHARTS, "data"): _optional(_dict),
    (ids.RUN_STORE, "data"): _optional(_dict),
    (ids.TL_RANKS, "value"): _optional(_ints),
    (ids.TL_CPU, "value"): _optional(_texts),
    (ids.TL_WINDOW, "data"): _optional(_window),
    (ids.TL_SEARCH, "value"): _optional(_text),
    (ids.TL_ZOOM, "data"): _optional(_dict),
    (ids.TL_GRAPH, "clickData"): _optional(_dict),
    (ids.TL_DOWNLOAD_BTN, "n_clicks"): _optional(_int),
    (ids.K_CLASS, "value"): _optional(_text),
    (ids.C_WAITS, "clickData"): _optional(_dict),
    (ids.N_METRICS, "value"): _optional(_texts),
    (ids.CMP_BASE, "value"): _optional(_text),
    (ids.CMP_NEW, "value"): _optional(_text),
}


def finite(*values) -> bool:
    """Every value a real number that is not NaN or infinite (plotly sends such ranges)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               for v in values)


def _pairs(deps) -> list[tuple[str, str]]:
    """(id, property) of declared Output/Input/State objects or of ``{"id", "property"}``."""
    deps = deps if isinstance(deps, (list, tuple)) else [deps]
    return [(getattr(d, "component_id", None), getattr(d, "component_property", None))
            for d in deps]


def _outputs_match(declared, sent) -> bool:
    """``sent`` names the declared outputs in the declared shape: a list for a list of
    outputs, one object for a single output."""
    if isinstance(declared, (list, tuple)) != isinstance(sent, list):
        return False
    items = sent if isinstance(sent, list) else [sent]
    if not all(isinstance(d, dict) for d in items):
        return False
    return [(d.get("id"), d.get("property")) for d in items] == _pairs(declared)


def _values_problem(part: str, declared: list[dict], sent) -> str | None:
    if not isinstance(sent, list) or not all(isinstance(d, dict) for d in sent):
        return f"{part} must be a list of objects"
    want = [(d["id"], d["property"]) for d in declared]
    if [(d.get("id"), d.get("property")) for d in sent] != want:
        return f"{part} are not the callback's {part}"
    for (cid, prop), d in zip(want, sent):
        check = PROP_TYPES.get((cid, prop))
        if check is None:
            return f"{cid}.{prop} has no declared type (add it to guard.PROP_TYPES)"
        if not check(d.get("value")):
            return f"{cid}.{prop} has a value of the wrong type or size"
    return None


def callback_problem(callback_map: dict, body) -> str | None:
    """Why ``body`` is not a request the renderer sends for a server callback in
    ``callback_map``; None when it is one."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    entry = callback_map.get(output) if isinstance(output, str) else None
    if entry is None or "callback" not in entry:
        return "no server callback has this output"
    for part in ("inputs", "state"):
        problem = _values_problem(part, entry.get(part, []), body.get(part, []))
        if problem:
            return problem
    if not _outputs_match(entry["output"], body.get("outputs")):
        return "outputs are not the callback's outputs"
    changed = body.get("changedPropIds", [])
    if not isinstance(changed, list) or not all(map(_text, changed)):
        return "changedPropIds must be a list of strings"
    return None


def _check_request(app):
    prefix = app.config.routes_pathname_prefix
    if request.path.startswith(prefix + SUITES_PATH):
        return _check_suites_path()
    if request.method != "POST" or request.path != prefix + UPDATE_PATH:
        return None
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # nesting deeper than the JSON parser recurses
        body = None
    problem = callback_problem(app.callback_map, body)
    if problem is None:
        return None
    log.info("refused a callback request: %s", problem)
    return jsonify(error=problem), 400


def _check_suites_path():
    """A component-suite path the suites route does not take (an empty segment, ...) would
    fall through to the page route: answer it as what it is, a file that is not there."""
    rule = request.url_rule.rule if request.url_rule is not None else ""
    return None if SUITES_PATH in rule else _not_found(None)


def _not_found(_exc):
    return jsonify(error="not found"), 404


def install(app) -> None:
    """Check every callback request of ``app`` and answer unknown component-suite paths
    with 404. The hook runs after Dash's own first-request hooks, which register the page
    router in the callback map."""
    app.server.before_request(lambda: _check_request(app))
    app.server.register_error_handler(DependencyException, _not_found)
