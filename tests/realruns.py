"""Run folders built from the bundled real runs for tests: copies with strangers, loops,
temporaries and merged outputs added, and real traces split into profiler cycles."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import orjson

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "samples" / "runs"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}


def sample_labels(summary: Path) -> dict[str, dict]:
    """A SUMMARY.txt's ``NAME PROFKIT_SAMPLE {...}`` lines (the numbers each workload printed
    of itself, independently of profkit) as {NAME: the line's JSON}; other lines are left
    out."""
    out = {}
    for line in summary.read_text().splitlines():
        name, _, doc = line.partition(" PROFKIT_SAMPLE ")
        if doc:
            out[name.strip()] = orjson.loads(doc) if "NaN" not in doc else json.loads(doc)
    return out


def copy_run(name: str, dest: Path) -> Path:
    """A copy of ``samples/runs/<name>`` at ``dest``."""
    shutil.copytree(RUNS / name, dest)
    return dest


def read_doc(path: Path) -> dict:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


class _Event(msgspec.Struct):
    ph: Any = None
    ts: Any = msgspec.UNSET


class _Events(msgspec.Struct):
    traceEvents: list[_Event] = []


def complete_events(raw: bytes) -> int:
    """How many complete ("X") events with a ``ts`` the trace JSON ``raw`` holds: only those
    two fields are decoded (msgspec skips the rest), a tenth of the CPU of ``json.loads``
    of the whole document, the same count on every corpus trace."""
    doc = msgspec.json.decode(raw, type=_Events)
    return sum(e.ph == "X" and e.ts is not msgspec.UNSET for e in doc.traceEvents)


def write_doc(path: Path, doc: dict) -> Path:
    data = orjson.dumps(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def step_starts_us(doc: dict) -> dict[int, float]:
    """CPU start (us, as written) of each ProfilerStep#N (the outermost range)."""
    out: dict[int, tuple[float, float]] = {}
    for e in doc["traceEvents"]:
        name = str(e.get("name", ""))
        if e.get("ph") == "X" and name.startswith("ProfilerStep#") and e.get("cat") not in GPU_CATS:
            n = int(name.split("#")[1])
            if n not in out or e["dur"] > out[n][1]:
                out[n] = (e["ts"], e["dur"])
    return {n: ts for n, (ts, _) in out.items()}


def split_cycles(doc: dict, first_steps: list[int]) -> list[dict]:
    """``doc`` cut into profiler cycles that begin at the CPU start of each step in
    ``first_steps`` (the first cycle: everything before the second's start). GPU work and
    flow arrows go with the runtime call that launched them (by correlation), metadata
    events into every cycle; each cycle gets its own Kineto trace id, as torch.profiler's
    cycles do. ProfilerStep numbers are kept, as torch.profiler keeps counting."""
    starts = step_starts_us(doc)
    cuts = [starts[n] for n in first_steps[1:]]
    launched = {}
    for e in doc["traceEvents"]:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and corr is not None:
            launched[corr] = e["ts"]

    def cycle_of(e: dict) -> int:
        ts = e.get("ts", 0)
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in GPU_CATS and corr in launched:
            ts = launched[corr]
        elif e.get("ph") in ("s", "f") and e.get("id") in launched:
            ts = launched[e["id"]]
        return sum(ts >= c for c in cuts)

    cycles = [dict(doc, traceEvents=[]) for _ in first_steps]
    for e in doc["traceEvents"]:
        targets = cycles if e.get("ph") == "M" else [cycles[cycle_of(e)]]
        for c in targets:
            c["traceEvents"].append(e)
    for k, c in enumerate(cycles):
        if "trace_id" in c:
            c["trace_id"] = f"{doc['trace_id']}-{k}"
    return cycles


def write_profkit_cycles(run_dir: Path, first_steps: list[int]) -> list[Path]:
    """Replace every ``traces/rank{R}.pt.trace.json.gz`` of a profkit run folder by its
    cycles, named as profile(repeat=...) names them (``rank{R}.cycle{K}...`` after the
    first)."""
    written = []
    for trace in sorted((run_dir / "traces").glob("rank*.pt.trace.json.gz")):
        rank = trace.name.split(".")[0]
        for k, cycle in enumerate(split_cycles(read_doc(trace), first_steps)):
            name = f"{rank}.pt.trace.json.gz" if k == 0 else f"{rank}.cycle{k}.pt.trace.json.gz"
            written.append(write_doc(trace.parent / name, cycle))
    return written
