"""What one CPU op's arguments say and cost, read while the event columns are built
(:mod:`.accumulate`, :mod:`.nativefeed`): FLOPs, bytes and precision from its shapes and
dtypes, and its ``Input Dims`` kept as text."""

from __future__ import annotations

import numpy as np
import orjson

from profkit.classify.flops import PRECISIONS, dtype_precision, shape_flops
from profkit.classify.opfamilies import op_family
from profkit.classify.shapes import readable_dims
from profkit.classify.traffic import UNKNOWN, op_cost
from profkit.trace.traceevents import Args

MAX_DIMS_CHARS = 4000  # an op's Input Dims text kept up to this (longer: cut, unreadable)


def shape_costs(name: str, a: Args, linked: bool) -> tuple:
    """(FLOPs from shapes, whether they were dropped as impossible, (read, write, vector
    FLOPs), precision code, dims, concrete, whether the cost was dropped) of one op; dims
    and concrete are kept only for the convolution links (``linked``). Shapes that are no
    shapes, or that a formula fails on, cost only this op (NaN, counted)."""
    dims, concrete, types = _json(a.input_dims), _json(a.concrete_inputs), _json(a.input_types)
    value, dropped = shape_flops(name, dims, concrete)
    readable = dims is None or readable_dims(dims)
    cost, cost_dropped = UNKNOWN, False
    if op_family(name):
        try:
            cost = op_cost(name, dims, types, concrete, value, _json(a.input_strides)) \
                if readable else UNKNOWN
        except Exception:  # e.g. numpy's 32-dimension broadcast: this op's cost only
            cost = UNKNOWN
            readable = False
        cost_dropped = not readable
    found = dtype_precision(types, name)
    code = PRECISIONS.index(found) + 1 if found else 0
    linked = linked and readable
    return (value, dropped, cost, code, dims if linked else None, concrete if linked else None,
            cost_dropped)


def dims_raw(n: int, rows: np.ndarray, cpu_args: list[Args]) -> list:
    """The ``Input Dims`` JSON of each of the ``n`` events that is a CPU op with one (None
    elsewhere; ``rows``, ``cpu_args``: the CPU ops), as bytes: coded as text
    (:func:`dims_text`, once per distinct value), so a trace's few hundred distinct shape
    lists are parsed once, by the analyzers that read them
    (profkit.analyzers.measure.signature)."""
    out: list = [None] * n
    for i, a in zip(rows.tolist(), cpu_args):
        if len(a.input_dims):
            out[i] = bytes(a.input_dims)
    return out


def dims_text(raw: bytes) -> str:
    """One distinct ``Input Dims`` value as text (cut to MAX_DIMS_CHARS)."""
    return raw[:MAX_DIMS_CHARS].decode(errors="replace")


def _json(raw) -> object:
    """A raw JSON argument decoded, None when absent or not JSON."""
    if not len(raw):
        return None
    try:
        return orjson.loads(bytes(raw))
    except orjson.JSONDecodeError:
        return None
