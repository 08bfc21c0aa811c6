"""``profkit merge``: every rank's trace in one Perfetto-ready Chrome trace.

Ranks are written one at a time (memory is bounded by the largest rank, not the run).
Fields profkit does not change are carried as raw JSON bytes, so every event keeps its
args. Each (rank, original pid) becomes its own process named after rank, host and device;
flow ids are made unique per rank; timestamps move onto one clock and one base time; NVML
samples and the allocator's memory (allocated and reserved, :mod:`.memorytracks`) become
counter tracks beside the rank's GPU. The output is written to a temporary
file and renamed, so a failed merge leaves nothing half-written.
"""

from __future__ import annotations

import gzip
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson

from profkit import schema as S
from profkit.atomic import atomic_open
from profkit.errors import TraceError, UsageError
from profkit.model import RankData, Run, SkippedFile
from profkit.run.counters import nvml_samples
from profkit.timeline.memorytracks import memory_series
from profkit.trace import tracefile
from profkit.trace.header import base_time_ns
from profkit.validate import MAX_ABS_NS, Problems

log = logging.getLogger(__name__)

UNSET = msgspec.UNSET
Raw = msgspec.Raw
PIDS_PER_RANK = 1000  # remapped pid = rank * PIDS_PER_RANK + local index
FLOW_ID_STRIDE = 1 << 40  # remapped flow id = rank * stride + id
CHUNK_EVENTS = 20000
NS_PER_S = 1_000_000_000
MERGED_SCHEMA = "profkit.merged/1"
MAX_REL_US = 2 * MAX_ABS_NS / 1000  # an event within +-2**62 epoch ns, relative to the base


class MEvent(msgspec.Struct, omit_defaults=True, gc=False):
    """A trace event with every Chrome-trace key; untouched fields stay raw JSON."""

    ph: str | msgspec.UnsetType = UNSET
    cat: Raw | msgspec.UnsetType = UNSET
    name: Raw | msgspec.UnsetType = UNSET
    pid: int | str | None | msgspec.UnsetType = UNSET
    tid: Raw | msgspec.UnsetType = UNSET
    ts: float | None | msgspec.UnsetType = UNSET
    dur: Raw | msgspec.UnsetType = UNSET
    tts: Raw | msgspec.UnsetType = UNSET
    tdur: Raw | msgspec.UnsetType = UNSET
    id: int | str | None | msgspec.UnsetType = UNSET
    id2: Raw | msgspec.UnsetType = UNSET
    bp: Raw | msgspec.UnsetType = UNSET
    s: Raw | msgspec.UnsetType = UNSET
    scope: Raw | msgspec.UnsetType = UNSET
    cname: Raw | msgspec.UnsetType = UNSET
    sf: Raw | msgspec.UnsetType = UNSET
    stack: Raw | msgspec.UnsetType = UNSET
    bind_id: Raw | msgspec.UnsetType = UNSET
    flow_in: Raw | msgspec.UnsetType = UNSET
    flow_out: Raw | msgspec.UnsetType = UNSET
    args: Raw | msgspec.UnsetType = UNSET


_DECODER = msgspec.json.Decoder(list[MEvent])
_EVENT_DECODER = msgspec.json.Decoder(MEvent)
_ENCODER = msgspec.json.Encoder()
_PROCESS_META = {"process_name", "process_labels", "process_sort_index"}


@dataclass
class Window:
    """Keep events overlapping [start_ns, end_ns) on the aligned clock (None: unbounded)."""

    start_ns: int | None = None
    end_ns: int | None = None


@dataclass
class MergeReport:
    output: str
    ranks: list[int]
    events_written: int = 0
    skipped: list[SkippedFile] = field(default_factory=list)


def merge_run(run: Run, output: str | Path, *, ranks: list[int] | None = None,
              window: Window | None = None) -> MergeReport:
    """Write the merged trace of ``run`` to ``output`` (.json or .json.gz)."""
    output = Path(output)
    if not output.name.endswith((".json", ".json.gz")):
        raise UsageError(f"{output}: the output must end in .json or .json.gz")
    chosen = [r for r in run.rank_ids if ranks is None or r in ranks]
    if not chosen:
        raise UsageError(f"none of the ranks {ranks} is in the run (it has {run.rank_ids})")
    window = window or Window()
    base_ns = _common_base_ns(run, chosen)
    report = MergeReport(str(output), chosen, skipped=list(run.skipped))
    with atomic_open(output) as raw_fh:
        fh = gzip.GzipFile(fileobj=raw_fh, mode="wb", compresslevel=3, mtime=0) \
            if output.name.endswith(".gz") else raw_fh
        header = {"schemaVersion": 1, "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns}
        fh.write(orjson.dumps(header)[:-1] + b',"traceEvents":[')
        first = True
        for rank in chosen:
            try:
                chunks = _rank_chunks(run, run.ranks[rank], base_ns, window)
                for count, chunk in chunks:
                    fh.write(chunk if first else b"," + chunk)
                    first = False
                    report.events_written += count
            except TraceError as exc:
                report.skipped.append(SkippedFile(exc.path, exc.problem))
        fh.write(b"],")
        fh.write(orjson.dumps({"profkit": _summary(run, report)})[1:])
        if fh is not raw_fh:
            fh.close()
    return report


def _summary(run: Run, report: MergeReport) -> dict:
    """The top-level ``profkit`` key: it also marks the file as profkit's own output, which
    the loader then skips instead of reading it as a rank (profkit.run.loader.MERGED_OUTPUT)."""
    return {
        "schema": MERGED_SCHEMA,
        "world_size": run.world_size,
        "ranks": report.ranks,
        "skipped_files": [s.as_dict() for s in report.skipped],
        "notes": run.notes,
    }


def _common_base_ns(run: Run, ranks: list[int]) -> int:
    start = run.start_ns(ranks)
    return start - start % NS_PER_S


def _rank_chunks(run: Run, data: RankData, base_ns: int, window: Window):
    """(event count, encoded JSON without brackets) chunks of one rank's events (of each of
    its files: its profiler cycles), counters and metadata; events are decoded one batch at
    a time. Events that cannot be placed (wrong-typed ph/pid/ts/id, or ts off the int64
    clock) are left out and counted."""
    pids = _PidMap(data, _declared_host(run, data.rank))
    for path in data.meta.get("sources") or [data.path]:
        yield from _file_chunks(run, data.rank, path, pids, base_ns, window)
    tail = (_counter_events(data, pids, base_ns, window)
            + _memory_events(data, pids, base_ns, window) + pids.metadata_events())
    if tail:
        yield len(tail), _ENCODER.encode(tail)[1:-1]


def _file_chunks(run: Run, rank: int, path: str, pids: _PidMap, base_ns: int, window: Window):
    trace = tracefile.load_split(path)  # merge re-encodes every raw event, read as they come
    base_time = base_time_ns(trace.header.baseTimeNanoseconds, Problems())
    shift_us = (base_time - run.clock_offset_ns(rank) - base_ns) / 1000.0
    lo, hi = _window_us(window, base_ns)
    rank_offset = rank * FLOW_ID_STRIDE
    dropped = 0
    for chunk in trace.raw_chunks(CHUNK_EVENTS):
        events = _decode_events(chunk)
        dropped += len(chunk) - len(events)
        kept = []
        for ev in events:
            if ev.ph == "M" and _meta_name(ev) in _PROCESS_META:
                pids.note(ev)
                continue
            if isinstance(ev.ts, float):
                ev.ts += shift_us
                if not abs(ev.ts) <= MAX_REL_US:  # also NaN
                    dropped += 1
                    continue
                outside = (hi is not None and ev.ts >= hi) or \
                    (lo is not None and ev.ts < lo and ev.ts + _dur(ev) <= lo)
                if outside and ev.ph != "M":
                    continue
            ev.pid = pids.new_pid(ev.pid)
            if ev.ph in ("s", "f", "t") and isinstance(ev.id, int):
                ev.id = ev.id % FLOW_ID_STRIDE + rank_offset  # ids past the stride wrap
            kept.append(ev)
        if kept:
            yield len(kept), _ENCODER.encode(kept)[1:-1]
    if dropped:
        log.warning("%s: %d events not merged (a wrong-typed ph, pid, ts or id, or ts off the "
                    "clock)", path, dropped)


def _decode_events(chunk: list[Raw]) -> list[MEvent]:
    """The chunk's events; event by event when the batch has one the decoder refuses."""
    try:
        return _DECODER.decode(tracefile.json_array(chunk))
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    events = []
    for raw in chunk:
        try:
            events.append(_EVENT_DECODER.decode(raw))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return events


def _declared_host(run: Run, rank: int) -> str | None:
    """The rank's host as run.json declares it (validated there; guarded for other metas)."""
    declared = run.meta.get("ranks")
    entry = declared.get(str(rank)) if isinstance(declared, dict) else None
    host = entry.get("host") if isinstance(entry, dict) else None
    return host if isinstance(host, str) else None


def _meta_name(ev: MEvent) -> str:
    return bytes(ev.name).strip(b'"').decode(errors="replace") if ev.name is not UNSET else ""


def _dur(ev: MEvent) -> float:
    if ev.dur is UNSET:
        return 0.0
    try:
        return float(bytes(ev.dur))
    except ValueError:
        return 0.0


def _window_us(window: Window, base_ns: int) -> tuple[float | None, float | None]:
    lo = None if window.start_ns is None else (window.start_ns - base_ns) / 1000.0
    hi = None if window.end_ns is None else (window.end_ns - base_ns) / 1000.0
    return lo, hi


class _PidMap:
    """Remaps one rank's pids and names the resulting processes."""

    def __init__(self, data: RankData, host: str | None):
        self.rank = data.rank
        self.host = host or data.meta.get("host")
        self.labels: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.mapping: dict[Any, int] = {}
        self.gpu_pid: dict[int, Any] = {}
        gpu = data.events[data.events[S.KIND].isin(S.GPU_KINDS)]
        for device, pid in gpu.groupby(S.DEVICE, observed=True)[S.PID].first().items():
            self.gpu_pid[int(device)] = int(pid)

    def note(self, ev: MEvent) -> None:
        try:
            args = orjson.loads(bytes(ev.args)) if ev.args is not UNSET else {}
        except orjson.JSONDecodeError:
            args = {}
        args = args if isinstance(args, dict) else {}
        key = str(ev.pid)
        if isinstance(args.get("labels"), str) and args["labels"].strip():
            self.labels[key] = args["labels"].strip()
        if isinstance(args.get("name"), str):
            self.names[key] = args["name"]

    def new_pid(self, pid: Any) -> int:
        if pid not in self.mapping:
            self.mapping[pid] = self.rank * PIDS_PER_RANK + len(self.mapping)
        return self.mapping[pid]

    def counter_pid(self, device: int) -> int:
        return self.new_pid(self.gpu_pid.get(device, f"gpu{device}"))

    def _label(self, pid: Any) -> str:
        key = str(pid)
        if key in self.labels:
            return self.labels[key]
        if pid in self.gpu_pid.values():
            return f"GPU {pid}"
        if key.startswith("gpu"):
            return f"GPU {key[3:]}"
        if isinstance(pid, int):  # Kineto writes pid -1 for events of no process
            return f"CPU (pid {pid})" if pid >= 0 else "no process"
        return key.strip()

    def process_name(self, pid: Any) -> str:
        """``rank 0 · host · GPU 0``; a part that is empty (a process without a label) is
        left out, so a nameless process is just ``rank 0``."""
        parts = [f"rank {self.rank}", self.host or "", self._label(pid)]
        return " · ".join(p for p in parts if p)

    def metadata_events(self) -> list[MEvent]:
        out = []
        names = {old: self.process_name(old) for old in self.mapping}
        seen = Counter(names.values())
        for old, new in self.mapping.items():
            # two processes of one rank under one name (Kineto's pid -1 beside the CPU
            # process, both "CPU") are told apart by their pid in the trace
            shown = names[old] if seen[names[old]] == 1 else f"{names[old]} (pid {old})"
            name = orjson.dumps({"name": shown})
            sort = orjson.dumps({"sort_index": new})
            out.append(MEvent(ph="M", name=Raw(b'"process_name"'), pid=new, tid=Raw(b"0"), args=Raw(name)))
            out.append(MEvent(ph="M", name=Raw(b'"process_sort_index"'), pid=new, tid=Raw(b"0"), args=Raw(sort)))
        return out


def _counter_events(data: RankData, pids: _PidMap, base_ns: int, window: Window) -> list[MEvent]:
    """The rank's NVML samples as counter events. The trace's own counter samples are left
    out: their 'C' events are copied with every other event of the trace already."""
    c = nvml_samples(data.counters)
    if c.empty:
        return []
    ts = c[S.TS_NS].to_numpy()
    keep = np.ones(len(c), dtype=bool)
    if window.start_ns is not None:
        keep &= ts >= window.start_ns
    if window.end_ns is not None:
        keep &= ts < window.end_ns
    c = c[keep]
    out = []
    ts_us = (c[S.TS_NS].to_numpy() - base_ns) / 1000.0
    for t, device, metric, value in zip(ts_us, c[S.DEVICE].to_numpy(), c[S.METRIC].astype(str), c[S.VALUE].to_numpy()):
        out.append(MEvent(ph="C", name=Raw(orjson.dumps(metric)), pid=pids.counter_pid(int(device)),
                          tid=Raw(b"0"), ts=float(t), args=Raw(orjson.dumps({metric: float(value)}))))
    return out


def _memory_events(data: RankData, pids: _PidMap, base_ns: int, window: Window) -> list[MEvent]:
    """The allocator's allocated and reserved bytes per GPU as counter events (the memory
    table, thinned with every peak kept: :func:`~.memorytracks.memory_series`)."""
    out = []
    for metric, device, ts_ns, values in memory_series(data.table("memory"), window.start_ns,
                                                       window.end_ns):
        name, pid = Raw(orjson.dumps(metric)), pids.counter_pid(device)
        for t, value in zip(((ts_ns - base_ns) / 1000.0).tolist(), values.tolist()):
            out.append(MEvent(ph="C", name=name, pid=pid, tid=Raw(b"0"), ts=t,
                              args=Raw(orjson.dumps({metric: value}))))
    return out
