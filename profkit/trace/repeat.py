"""Repeating a Kineto trace's body in time: a longer capture of the same steps, every link
kept unique. Used by the synthetic-run generator and the benchmarks' large-run builder.

:class:`Repeater` splits a trace into metadata ('M') events, the whole-capture 'Trace'
span(s) and the body, and yields repetition r of the body shifted by ``r * shift`` (the
body's span plus a gap), with:

* ``ProfilerStep#N`` renumbered ``N + r * n_steps`` so steps stay unique and consecutive;
* ``args`` ids (:data:`ID_ARGS`) and flow-event ids offset per repetition by their maximum
  + 1, and ``args.Seq`` (a collective's sequence number) offset per process group so each
  group's sequence stays contiguous.

Metadata is meant to be written once and the Trace span lengthened by the repetitions.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import orjson

STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
# args keys holding ids that must stay unique across repetitions (offset by max + 1).
ID_ARGS = ("correlation", "External id", "Record function id", "Ev Idx", "Sequence number",
           "Comms Id")
FLOW_PHASES = ("s", "t", "f")


def read_trace(path: Path) -> dict:
    """A whole Kineto trace document (.json or .json.gz); ValueError if it is not one."""
    raw = Path(path).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Kineto trace (no traceEvents list)")
    return doc


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class Repeater:
    """Pre-analyses one source trace and yields its events for repetition r."""

    def __init__(self, doc: dict, gap_us: float):
        events = doc["traceEvents"]
        self.meta = [e for e in events if e.get("ph") == "M"]
        self.trace_spans = [e for e in events if e.get("ph") == "X" and e.get("cat") == "Trace"]
        self.body = [e for e in events if e.get("ph") != "M"
                     and not (e.get("ph") == "X" and e.get("cat") == "Trace")]

        t0, t1 = None, None
        float_ts = False
        steps: list[int] = []
        id_max = dict.fromkeys(ID_ARGS, 0)
        flow_max = 0
        seq_range: dict[object, list[int]] = {}
        for e in self.body:
            ts = e.get("ts")
            if ts is not None:
                float_ts = float_ts or isinstance(ts, float)
                end = ts + (e.get("dur") or 0)
                t0 = ts if t0 is None or ts < t0 else t0
                t1 = end if t1 is None or end > t1 else t1
            name = e.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                m = STEP_RE.match(name)
                if m:
                    steps.append(int(m.group(1)))
            if e.get("ph") in FLOW_PHASES and is_int(e.get("id")):
                flow_max = max(flow_max, e["id"])
            args = e.get("args")
            if args:
                for k in ID_ARGS:
                    v = args.get(k)
                    if is_int(v) and v > id_max[k]:
                        id_max[k] = v
                seq = args.get("Seq")
                if is_int(seq):
                    r = seq_range.setdefault(args.get("Process Group Name"), [seq, seq])
                    r[0], r[1] = min(r[0], seq), max(r[1], seq)
        if t0 is None:
            raise ValueError("the source trace has no timestamped events")
        span = t1 - t0
        self.t0, self.t1 = t0, t1
        self.float_ts = float_ts
        self.shift = (span + gap_us) if float_ts else int(round(span + gap_us))
        self.step_stride = (max(steps) - min(steps) + 1) if steps else 0
        self.n_steps = len(set(steps))
        self.id_stride = {k: v + 1 for k, v in id_max.items() if v > 0}
        self.flow_stride = flow_max + 1
        self.seq_stride = {pg: hi - lo + 1 for pg, (lo, hi) in seq_range.items()}

    def events(self, r: int) -> list[dict]:
        """The body events of repetition r (r = 0 gives them unchanged)."""
        if r == 0:
            return self.body
        dt = self.shift * r
        float_ts = self.float_ts
        step_off = self.step_stride * r
        id_off = {k: s * r for k, s in self.id_stride.items()}
        flow_off = self.flow_stride * r
        seq_off = {pg: s * r for pg, s in self.seq_stride.items()}
        out = []
        append = out.append
        for e in self.body:
            e2 = dict(e)
            ts = e2.get("ts")
            if ts is not None:
                e2["ts"] = round(ts + dt, 3) if float_ts else ts + dt
            name = e2.get("name")
            if step_off and isinstance(name, str) and name.startswith("ProfilerStep#"):
                m = STEP_RE.match(name)
                if m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + step_off}"
            if e2.get("ph") in FLOW_PHASES and is_int(e2.get("id")):
                e2["id"] = e2["id"] + flow_off
            args = e2.get("args")
            if args:
                a2 = None
                for k, off in id_off.items():
                    v = args.get(k)
                    if is_int(v) and v >= 0:
                        if a2 is None:
                            a2 = dict(args)
                        a2[k] = v + off
                if seq_off:
                    seq = args.get("Seq")
                    if is_int(seq) and seq >= 0:
                        if a2 is None:
                            a2 = dict(args)
                        a2["Seq"] = seq + seq_off.get(args.get("Process Group Name"), 0)
                if a2 is not None:
                    e2["args"] = a2
            append(e2)
        return out

    def trace_span_events(self, k: int) -> list[dict]:
        """The whole-capture 'Trace' span(s), lengthened by the k - 1 added repetitions."""
        out = []
        for e in self.trace_spans:
            e2 = dict(e)
            if isinstance(e2.get("dur"), (int, float)):
                dur = e2["dur"] + self.shift * (k - 1)
                e2["dur"] = round(dur, 3) if isinstance(dur, float) else dur
            out.append(e2)
        return out
