"""What a click on the timeline shows beside it: the event under the pointer with its full
name (the bars carry short kernel names), its times, where it ran and what the trace says
about it; for a bin of a zoomed-out window, its busy fraction; for a collective's link, the
collective.

A click sends back what the bar carries: (rank, layer, row in that rank's layer table,
:func:`profkit.dashboard.timeline.view.events_in_window`). Those come from the browser, so
each is checked against the run before anything is looked up.
"""

from __future__ import annotations

import re

import pandas as pd
from dash import html
from profkit.analyzers.analyze import part_name
from profkit.dashboard.timeline.data import CAUSE, CPU, GPU
from profkit.dashboard.ui.components import kv_list

from profkit import schema as S

HINT = "Click an event on the timeline to see it here: its full name, times and where it ran."
MAX_TEXT = 600  # characters of a hover text shown back (a link's, from the browser)
_TAG = re.compile(r"<[^>]{0,40}>")
# event columns shown, when the trace has them (-1 / NaN: it does not; an occupancy of 0:
# not estimated)
FACTS = ((S.KIND, "kind"), (S.CLASS, "class"), (S.SUBCLASS, "subclass"), (S.STEP, "step"),
         (S.STREAM, "stream"), (S.TID, "thread id"), (S.CORRELATION, "correlation"),
         (S.EXTERNAL_ID, "external id"), (S.BYTES, "size_bytes"),
         (S.OCCUPANCY_PCT, "occupancy_pct"), (S.FLOPS, "FLOPs"))


def clicked_point(click) -> dict | None:
    """The first point of a ``clickData``; None for anything else."""
    points = click.get("points") if isinstance(click, dict) else None
    point = points[0] if isinstance(points, list) and points else None
    return point if isinstance(point, dict) else None


def event_ref(point: dict, cache) -> tuple[int, str, int] | None:
    """(rank, layer, row) of the event a bar carries, when they name one of the run's."""
    ref = point.get("customdata")
    if not isinstance(ref, list) or len(ref) != 3:
        return None
    rank, layer, row = ref
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, row))
    if not ints or layer not in (GPU, CPU, CAUSE) or rank not in cache.run.ranks:
        return None
    events = cache.lanes(rank).events.get(layer)
    return (rank, layer, row) if events is not None and 0 <= row < len(events) else None


def details(cache, click) -> html.Div:
    """The panel's content for a click (see the module doc); the hint for anything else."""
    point = clicked_point(click)
    if point is None:
        return hint()
    ref = event_ref(point, cache)
    if ref is not None:
        return event_panel(cache, *ref)
    busy = point.get("customdata")
    if isinstance(busy, (int, float)) and not isinstance(busy, bool) and isinstance(point.get("x"), (int, float)):
        return html.Div([html.H3("busy fraction"), html.P(
            f"{busy:.0%} of the bin at {point['x']:.3f} ms is covered: zoom in to see single "
            "events.")], className="tl-event-body")
    text = point.get("text")
    if isinstance(text, str) and text:
        lines = _TAG.sub("\n", text[:MAX_TEXT]).splitlines()
        return html.Div([html.H3(lines[0]), *[html.P(line) for line in lines[1:]]],
                        className="tl-event-body")
    return hint()


def hint() -> html.P:
    return html.P(HINT, className="hint")


def event_panel(cache, rank: int, layer: str, row: int) -> html.Div:
    """One event: its full name, lane, start, end and duration, and its trace facts."""
    lanes = cache.lanes(rank)
    ev = lanes.events[layer].iloc[row]
    facts = {"rank": rank, "lane": str(ev["lane"]),
             "start": f"{ev['start_ms']:.3f} ms", "end": f"{ev['end_ms']:.3f} ms",
             "duration": _duration(int(ev["end_ns"] - ev["start_ns"]))}
    name = str(ev["name"])
    if layer == CAUSE:
        name = f"GPU idle: {part_name(name)}"
        facts["why"] = "the charged-time model's cause of this idle time (the part it counts in)"
    elif ev["source"] >= 0:
        source = cache.run.ranks[rank].events.iloc[int(ev["source"])]
        name = str(source[S.NAME])
        facts.update(_facts(source))
    return html.Div([html.H3(name, className="tl-event-name"), kv_list(facts)],
                    className="tl-event-body")


def _facts(source: pd.Series) -> dict:
    out = {}
    for column, label in FACTS:
        value = source.get(column)
        if value is None or (isinstance(value, float) and value != value):
            continue
        if isinstance(value, str) and not value or not isinstance(value, str) and value == -1:
            continue
        if column == S.OCCUPANCY_PCT and value == 0:
            continue  # Kineto writes 0 where it could not estimate it (nvjet GEMMs, NCCL)
        out[label] = value.item() if hasattr(value, "item") else str(value)
    if source.get(S.KIND) in S.GPU_KINDS:
        out.pop("thread id", None)  # a GPU event's tid is its stream
    else:
        out.pop("stream", None)
    return out


def _duration(ns: int) -> str:
    return f"{ns / 1e3:.1f} us" if ns < 1_000_000 else f"{ns / 1e6:.3f} ms"
