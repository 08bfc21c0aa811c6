"""The typed records a Kineto trace's events decode into, and the lenient path for events
the typed decoder refuses.

Events are a union tagged by their phase (``ph``): complete events (``X``) decode into
:class:`Event` with the arguments profkit reads, metadata events (``M``) into
:class:`Meta`, counter events (``C``) into :class:`CounterEvent`, instant events (``i``) into
:class:`InstantEvent`, and every other phase of
the Chrome trace format into an empty record (the decoder still checks the JSON, but builds
nothing from it). That, and argument defaults shared rather than built per event, decodes a
trace ~30% faster than one record type for every event. An event with an unknown or missing
phase makes its batch fail the typed decode; the lenient path then reads it event by event
(:func:`decode_lenient`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Union

import msgspec

NAN = math.nan
RAW_ARGS = frozenset(("Input Dims", "Input type", "Input Strides", "Concrete Inputs"))
DECODE_ERRORS = (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError, RecursionError)
_NO_RAW = msgspec.Raw()  # one shared empty Raw: the argument is absent


class Args(msgspec.Struct, gc=False):
    """The event arguments profkit reads; every other key is skipped by the decoder."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    stream: Any = None
    device: Any = None
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    flops: Any = None
    # Raw JSON, parsed only for the few ops whose FLOPs come from shapes (empty if absent).
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    seq_number: Any = msgspec.field(default=None, name="Sequence number")  # fwd op <-> backward node
    bytes: Any = None
    kind: Any = None  # AMD memcpy direction ("DtoD") or kernel dispatch kind
    collective: Any = msgspec.field(default=None, name="Collective name")
    dtype: Any = None
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    seq: Any = msgspec.field(default=None, name="Seq")
    comms_id: Any = msgspec.field(default=None, name="Comms Id")
    src_rank: Any = msgspec.field(default=None, name="Src Rank")  # a recv's peer (group rank)
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")  # a send's peer (group rank)
    name: Any = None  # metadata events: process / thread name
    labels: Any = None  # metadata events: process labels ("GPU 0", "CPU")


# The Args fields kept as raw JSON (empty where absent), and a copy of some args without them:
# raw values point into the buffer the whole batch was decoded from, which one kept Args
# would otherwise keep alive (3 MB per batch).
_RAW_FIELDS = {f.name: _NO_RAW for f in msgspec.structs.fields(Args) if f.type is msgspec.Raw}


def without_raw(args: Args) -> Args:
    """``args`` with its raw JSON fields emptied (see :data:`_RAW_FIELDS`)."""
    return msgspec.structs.replace(args, **_RAW_FIELDS)


class _Range(msgspec.Struct, gc=False):
    """The fields a complete or metadata event carries (the two phases are checked alike)."""

    name: str | None = None
    cat: str | None = None
    ts: float | None = NAN
    dur: float | None = NAN
    pid: int | str | None = None
    tid: int | str | None = None
    args: Args | None = None


class Event(_Range, tag_field="ph", tag="X"):
    """A complete event: a range with a start and a duration (us)."""


class Meta(_Range, tag_field="ph", tag="M"):
    """A metadata event (process and thread names and labels), checked as :class:`Event`."""


class CounterEvent(msgspec.Struct, tag_field="ph", tag="C", gc=False):
    """A counter event: the values of one or more series at one time (``args``: series ->
    value). Fields take any JSON, so that a malformed counter never sends its batch down
    the slow lenient path; profkit.trace.countersamples keeps the samples that make sense."""

    name: Any = None
    ts: Any = None
    pid: Any = None
    args: Any = None


class InstantEvent(msgspec.Struct, tag_field="ph", tag="i", gc=False):
    """An instant event: a point in time. Its args stay raw JSON, decoded only for the
    events profkit reads (the allocator's ``[memory]`` events:
    profkit.trace.memorysamples); other fields take any JSON, as a counter's do."""

    name: Any = None
    ts: Any = None
    tid: Any = None  # the thread (memory events: the CPU thread that allocated)
    args: msgspec.Raw = _NO_RAW


# Every other phase of the Chrome trace format: checked as JSON, nothing kept.
OTHER_PHASES = ("B", "E", "I", "b", "n", "e", "s", "t", "f", "P", "O", "N", "D",
                "V", "v", "R", "c", "(", ")")
_OTHERS = tuple(msgspec.defstruct(f"Phase{ord(p)}", [], tag_field="ph", tag=p, gc=False)
                for p in OTHER_PHASES)
AnyEvent = Union[(Event, Meta, CounterEvent, InstantEvent, *_OTHERS)]  # noqa: UP007 - a union built from a tuple
SKIPPED = _OTHERS[0]()  # what the lenient path makes of an event of another phase

BATCH_DECODER = msgspec.json.Decoder(list[AnyEvent])
_EVENT_DECODER = msgspec.json.Decoder(AnyEvent)


def decode_lenient(chunk: list[msgspec.Raw], repairs: Counter) -> list:
    """Slow path, event by event: an event the typed decoder refuses is parsed as plain
    JSON and repaired field by field (counted in ``repairs``); one that is no event
    object is dropped."""
    kept = []
    for raw in chunk:
        try:
            kept.append(_EVENT_DECODER.decode(raw))
        except DECODE_ERRORS:
            try:
                ev = _repair_event(raw, repairs)
            except Exception:  # a value no repair foresaw costs its event, never the rank
                repairs["dropped"] += 1
                continue
            if ev is not None:
                kept.append(ev)
    return kept


def _repair_event(raw: msgspec.Raw, repairs: Counter) -> Any:
    try:
        ev = json.loads(bytes(raw))  # reads what msgspec refuses (1e400 as inf, huge ints)
    except (ValueError, RecursionError):
        ev = None
    # a phase that is neither text nor absent ([], {}, 0) names no phase: the event goes
    if not isinstance(ev, dict) or not isinstance(ev.get("ph"), (str, type(None))):
        repairs["dropped"] += 1
        return None
    kind = {"X": Event, "M": Meta}.get(ev.get("ph"))
    if kind is None:  # another phase, or none: nothing profkit reads (nor checks)
        return SKIPPED
    for key in ("name", "cat"):
        if not isinstance(ev.get(key, ""), str):
            repairs[key] += 1
            ev[key] = None
    for key in ("ts", "dur"):
        if key in ev:
            ev[key] = _float_or_nan(ev[key], key, repairs)
    for key in ("pid", "tid"):
        if not isinstance(ev.get(key), (int, str, type(None))):
            repairs[key] += 1
            ev[key] = str(ev[key])[:100]
    args = ev.get("args")
    if args is not None and not isinstance(args, dict):
        repairs["args"] += 1
        ev.pop("args")
    elif args is not None:  # the raw fields: kept as JSON text
        for key in RAW_ARGS.intersection(args):
            args[key] = msgspec.Raw(json.dumps(args[key]).encode())
    try:
        return msgspec.convert(ev, kind)
    except (msgspec.ValidationError, RecursionError):
        repairs["dropped"] += 1
        return None


def _float_or_nan(value: Any, key: str, repairs: Counter) -> float:
    try:
        return float(value) if value is not None else NAN
    except (TypeError, ValueError, OverflowError):
        repairs[key] += 1
        return NAN
