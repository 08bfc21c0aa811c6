"""Structure-aware mutations of trace seeds for the native reader's identity test: values of
the fields profkit reads replaced by the forms that test its rules (null, text, huge, tiny,
negative zero, exponents, escapes, nested), keys repeated or dropped, phases changed."""

from __future__ import annotations

import random

import orjson

KEYS = ("ph", "name", "cat", "ts", "dur", "pid", "tid", "args")
ARG_KEYS = ("correlation", "External id", "stream", "device", "blocks per SM",
            "est. achieved occupancy %", "flops", "bytes", "Input Dims", "Input type",
            "Input Strides", "Concrete Inputs", "Collective name", "In msg nelems",
            "Sequence number", "Total Allocated", "Bytes")
VALUES = ("null", '""', '"x"', "1", "-1", "0", "-0", "1.5", "-0.0", "1e400", "1e-400",
          "1E2", "2.5e-3", "9223372036854775807", "9223372036854775808", "4611686018427387905",
          "-4611686018427387904", "18446744073709551616", '"12"', '"-3"', "true", "[]", "{}",
          '"\\u00e9t\\u00e9"', '"a\\"b\\\\c"', '"\\ud83d\\ude00"', "9007199254740993",
          "123456789.123456789", "5028908799624.058", "0.1", "[[1, 2], [3]]",
          '"ProfilerStep#7"', '"kernel"', '"cpu_op"', '"X"', '"M"', '"i"', '"C"', '"f"', '"Q"',
          '"ncclDevKernel_AllReduce"', '"aten::mm"', '"[memory]"', "1" * 25, '"\\/"')


def _pairs(value) -> list | None:
    return [[k, _pairs(v) if k == "args" and isinstance(v, dict) else orjson.dumps(v).decode()]
            for k, v in value.items()] if isinstance(value, dict) else None


def _text(pairs) -> str:
    if isinstance(pairs, str):
        return pairs
    return "{" + ", ".join(f"{orjson.dumps(k).decode()}: {_text(v)}" for k, v in pairs) + "}"


def mutate(seed: bytes, rng: random.Random, rounds: int = 6) -> bytes:
    """The seed trace with ``rounds`` field-level mutations of its events."""
    doc = orjson.loads(seed)
    events = [_pairs(e) or orjson.dumps(e).decode() for e in doc.pop("traceEvents")]
    for _ in range(rounds):
        i = rng.randrange(len(events))
        ev = events[i]
        if isinstance(ev, str):
            continue
        op = rng.randrange(6)
        if op == 0:  # a field of the event
            key = rng.choice(KEYS)
            ev.append([key, rng.choice(VALUES)])
            if rng.random() < 0.7:  # replace rather than repeat
                ev[:] = [p for p in ev[:-1] if p[0] != key] + [ev[-1]]
        elif op == 1:  # an arg
            args = next((p for p in ev if p[0] == "args" and isinstance(p[1], list)), None)
            if args is None:
                args = ["args", []]
                ev.append(args)
            key = rng.choice(ARG_KEYS)
            if rng.random() < 0.7:
                args[1] = [p for p in args[1] if p[0] != key]
            args[1].append([key, rng.choice(VALUES)])
        elif op == 2 and ev:  # drop a key
            del ev[rng.randrange(len(ev))]
        elif op == 3:  # the same event twice
            events.insert(i, [list(p) for p in ev])
        elif op == 4:  # an escaped key
            if ev:
                k = rng.randrange(len(ev))
                ev[k][0] = ev[k][0].replace("a", "\\u0061") if "a" in ev[k][0] else ev[k][0]
        else:  # an event that is no object
            events[i] = rng.choice(("1", "null", '"ph"', "[]"))
    body = ",\n".join(e if isinstance(e, str) else _text(e) for e in events)
    head = "".join(f"{orjson.dumps(k).decode()}: {orjson.dumps(v).decode()}, "
                   for k, v in doc.items())
    return ("{" + head + '"traceEvents": [\n' + body + "\n]}").encode()
