"""Facts about PyTorch profiler (Kineto) traces, computed independently of profkit.

    python bench/independent_check.py TRACE_OR_DIR [...] [-o facts.json] [--gaps 5] [--markdown]

A second opinion for profkit's numbers: plain json/gzip and numpy, no profkit import, so a bug
in profkit's decoder or interval code cannot hide in both. Per trace file it reports events
by category, GPU kernel / memcpy / memset time, the union of GPU busy time over the profiled
window (ProfilerStep ranges, else first to last GPU event), per-step wall time, memcpy time by
direction and host memory kind, launch calls against kernels, CUDA/HIP graph capture calls,
the largest GPU idle gaps with what the launching CPU thread was doing during each, and the
kernels that look like communication. Every time is integer nanoseconds (`_ns`).

A file that cannot be read is reported (name and problem, on stderr and under "errors") and
the others are still checked; the exit status is 1 when any file failed. The output file is
written whole (temporary file, then rename), and not at all when no file could be read.
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import os
import re
import sys
import tempfile
import zlib
from collections import Counter, defaultdict
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

# PyTorch 1.8-1.9 traces (the TensorBoard plugin samples) used capitalised categories.
LEGACY_CATS = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset",
               "Runtime": "cuda_runtime", "Operator": "cpu_op"}
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CPU_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"}
LAUNCH_NAMES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
    "cuLaunchKernelEx", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel",
}
GRAPH_RE = re.compile(r"^(cuda|hip|cu)(Stream(BeginCapture|EndCapture|GetCaptureInfo)\w*"
                      r"|Graph(Instantiate|Launch|Upload)\w*)$")
# Names are a fallback (the correlated CPU op is better), but this checker must not share
# profkit's classifier, so it keeps its own deliberately plain list.
COMM_RE = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|"
                     r"sendrecv|broadcast|deep_?ep|nvshmem|cross_device_reduce|"
                     r"\bep::(?:intranode|internode|low_latency)", re.IGNORECASE)
MEMCPY_RE = re.compile(r"Memcpy (\w+)(?: \((\w+) -> (\w+)\))?")
STEP_RE = re.compile(r"^ProfilerStep#\d+$")


class TraceError(Exception):
    """A trace file that cannot be read; the message names the file and the problem."""


def _ns(value) -> int:
    """Microseconds as written in the JSON (int, float or decimal string) to integer ns."""
    try:
        ns = int((Decimal(str(value)) * 1000).to_integral_value())
    except (InvalidOperation, OverflowError) as exc:
        raise ValueError(f"not a number: {value!r}") from exc
    if abs(ns) >= 2**62:  # keeps ts + dur inside int64 for numpy
        raise ValueError(f"time out of range: {value!r}")
    return ns


def load_trace(path: Path) -> dict:
    """The parsed trace document; floats stay decimal strings so times convert exactly."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw, parse_float=str)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: cannot read or gunzip: {exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise TraceError(f"{path}: not valid JSON: {exc}") from exc
    if isinstance(doc, list) and all(isinstance(ev, dict) for ev in doc):
        doc = {"traceEvents": doc}  # a bare event array, as some exporters write
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: no traceEvents list; not a Chrome/Kineto trace")
    return doc


def _cat(ev: dict) -> str:
    cat = ev.get("cat")
    return LEGACY_CATS.get(cat, cat) if isinstance(cat, str) else ""


def complete_events(doc: dict, path: Path) -> list[dict]:
    """`X` events as {cat, name, pid, tid, ts_ns, end_ns, args}; others are counted only."""
    out = []
    for i, ev in enumerate(doc["traceEvents"]):
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        try:
            ts_ns, dur_ns = _ns(ev["ts"]), _ns(ev.get("dur", 0))
        except (KeyError, ValueError) as exc:
            raise TraceError(f"{path}: event {i} has no usable ts/dur: {exc}") from exc
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        corr = args.get("correlation")
        out.append({"cat": _cat(ev), "name": str(ev.get("name", "")), "pid": str(ev.get("pid")),
                    "tid": str(ev.get("tid")), "ts_ns": ts_ns, "end_ns": ts_ns + max(dur_ns, 0),
                    "args": args, "corr": corr if isinstance(corr, (int, str)) else None})
    return out


def merge_intervals(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint (starts, ends) arrays."""
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    first = np.ones(s.size, dtype=bool)
    first[1:] = s[1:] > reach[:-1]
    idx = np.flatnonzero(first)
    return s[idx], np.maximum.reduceat(e, idx)


def covered_ns(ms: np.ndarray, me: np.ndarray, lo: int, hi: int) -> int:
    """How much of [lo, hi) the merged intervals cover."""
    return int(np.clip(np.minimum(me, hi) - np.maximum(ms, lo), 0, None).sum())


def profiler_steps(events: list[dict]) -> list[dict]:
    """CPU-side ProfilerStep#N ranges, one per step name, in time order."""
    steps: dict[str, list[int]] = {}
    for ev in events:
        if STEP_RE.match(ev["name"]) and ev["cat"] != "gpu_user_annotation":
            lo_hi = steps.setdefault(ev["name"], [ev["ts_ns"], ev["end_ns"]])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], ev["ts_ns"]), max(lo_hi[1], ev["end_ns"])
    ranges = [{"name": n, "start_ns": lo, "end_ns": hi} for n, (lo, hi) in steps.items()]
    return sorted(ranges, key=lambda r: r["start_ns"])


def memcpy_facts(gpu: list[dict], gpu_total_ns: int) -> dict:
    """Memcpy time by direction and by host memory kind, as named by CUPTI/roctracer."""
    by_dir: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ev in gpu:
        if ev["cat"] != "gpu_memcpy":
            continue
        m = MEMCPY_RE.match(ev["name"])
        direction = m.group(1) if m else ev["name"]
        host = [k for k in (m.groups()[1:] if m else ()) if k and k != "Device"]
        dur = ev["end_ns"] - ev["ts_ns"]
        for table, key in ((by_dir, direction), (by_kind, host[0] if host else "none (device to device)")):
            table[key][0] += 1
            table[key][1] += dur

    def rows(table):
        return {k: {"count": c, "time_ns": t, "share_of_gpu_time": _ratio(t, gpu_total_ns)}
                for k, (c, t) in sorted(table.items())}
    return {"by_direction": rows(by_dir), "by_host_memory": rows(by_kind)}


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 6) if b else None


def launch_facts(events: list[dict], gpu: list[dict]) -> dict:
    """Launch and graph API calls against the GPU work they produced."""
    runtime = [ev for ev in events if ev["cat"] in ("cuda_runtime", "cuda_driver")]
    launches = Counter(ev["name"] for ev in runtime if ev["name"] in LAUNCH_NAMES)
    graph = Counter(ev["name"] for ev in runtime if GRAPH_RE.match(ev["name"]))
    gpu_corr = {ev["corr"] for ev in gpu if ev["corr"] is not None}
    orphan = sum(1 for ev in runtime if ev["name"] in LAUNCH_NAMES and ev["corr"] not in gpu_corr)
    return {
        "launch_calls": dict(sorted(launches.items())),
        "launch_calls_total": sum(launches.values()),
        "kernels": sum(1 for ev in gpu if ev["cat"] == "kernel"),
        "launch_calls_without_gpu_event": orphan,
        "graph_calls": dict(sorted(graph.items())),
        "graph_capture": any("BeginCapture" in n for n in graph),
        "graph_launch": any(n.endswith("GraphLaunch") for n in graph),
    }


def comm_kernels(gpu: list[dict], limit: int = 20) -> list[dict]:
    """Kernels whose names look like collectives or expert-parallel exchange, by time."""
    agg: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for ev in gpu:
        if ev["cat"] == "kernel" and COMM_RE.search(ev["name"]):
            agg[ev["name"]][0] += 1
            agg[ev["name"]][1] += ev["end_ns"] - ev["ts_ns"]
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:limit]
    return [{"name": n, "count": c, "time_ns": t} for n, (c, t) in rows]


def innermost_activity(cpu: list[tuple[int, int, str]], lo: int, hi: int) -> tuple[dict, int]:
    """Per name, ns of [lo, hi) in which it was the innermost covering CPU event; plus ns
    covered by none. Innermost = latest start among those covering the instant (CPU events
    on one thread nest), ties to the one that ends first."""
    inside = sorted((s, e, n) for s, e, n in cpu if s < hi and e > lo)
    cuts = sorted({lo, hi} | {t for s, e, _ in inside for t in (s, e) if lo < t < hi})
    heap: list[tuple[int, int, str]] = []
    acc: Counter = Counter()
    bare, k = 0, 0
    for a, b in zip(cuts, cuts[1:]):
        while k < len(inside) and inside[k][0] <= a:
            s, e, n = inside[k]
            heapq.heappush(heap, (-s, e, n))
            k += 1
        while heap and heap[0][1] <= a:
            heapq.heappop(heap)
        if heap:
            acc[heap[0][2]] += b - a
        else:
            bare += b - a
    return dict(acc.most_common()), bare


def _threads(events: list[dict]) -> dict[tuple, list[tuple[int, int, str]]]:
    by_thread: dict[tuple, list] = defaultdict(list)
    for ev in events:
        if ev["cat"] in CPU_CATS:
            by_thread[(ev["pid"], ev["tid"])].append((ev["ts_ns"], ev["end_ns"], ev["name"]))
    return by_thread


def _launch_thread_of(gpu_ev: dict | None, launch_thread: dict, fallback):
    corr = gpu_ev["corr"] if gpu_ev else None
    if corr is not None and corr in launch_thread:
        return launch_thread[corr], "correlation"
    return fallback, "busiest launching thread"


def idle_gaps(events, gpu, ms, me, window, top: int) -> list[dict]:
    """The `top` largest holes in GPU busy time inside the window, with what the thread that
    launched the next GPU work was doing meanwhile (innermost CPU event per instant)."""
    lo, hi = window
    inner = (me > lo) & (ms < hi)
    # Hole i runs from the end of busy interval i-1 (or the window start) to the start of
    # busy interval i (or the window end).
    hole_lo = np.concatenate(([lo], np.clip(me[inner], lo, hi)))
    hole_hi = np.concatenate((np.clip(ms[inner], lo, hi), [hi]))
    gaps = sorted(((int(b - a), int(a), int(b)) for a, b in zip(hole_lo, hole_hi) if b > a),
                  reverse=True)[:top]
    runtime = [ev for ev in events if ev["cat"] in ("cuda_runtime", "cuda_driver")]
    launch_thread = {ev["corr"]: (ev["pid"], ev["tid"]) for ev in runtime}
    busiest = Counter((ev["pid"], ev["tid"]) for ev in runtime if ev["name"] in LAUNCH_NAMES)
    fallback = busiest.most_common(1)[0][0] if busiest else None
    gpu_sorted = sorted(gpu, key=lambda ev: ev["ts_ns"])
    gpu_starts = np.array([ev["ts_ns"] for ev in gpu_sorted], dtype=np.int64)
    threads, out = _threads(events), []
    for dur, a, b in gaps:
        i = int(np.searchsorted(gpu_starts, b, side="left"))
        nxt = gpu_sorted[i] if i < len(gpu_sorted) else None
        thread, how = _launch_thread_of(nxt, launch_thread, fallback)
        names, bare = innermost_activity(threads.get(thread, []), a, b)
        out.append({"start_ns": a, "dur_ns": dur,
                    "next_gpu_event": nxt["name"][:120] if nxt else None,
                    "cpu_thread": None if thread is None else f"{thread[0]}/{thread[1]}",
                    "thread_found_by": how, "cpu_innermost_ns": dict(list(names.items())[:5]),
                    "cpu_uncovered_ns": bare})
    return out


def window_facts(steps: list[dict], ms: np.ndarray, me: np.ndarray) -> tuple[dict, list]:
    """The profiled window and per-step wall time with the GPU busy time inside each step."""
    if steps:
        lo, hi, source = steps[0]["start_ns"], max(s["end_ns"] for s in steps), "ProfilerStep"
    elif ms.size:
        lo, hi, source = int(ms[0]), int(me[-1]), "first to last GPU event"
    else:
        return {"source": "none (no steps, no GPU events)"}, []
    busy = covered_ns(ms, me, lo, hi)
    window = {"source": source, "start_ns": lo, "dur_ns": hi - lo, "gpu_busy_ns": busy,
              "gpu_busy_fraction": _ratio(busy, hi - lo)}
    rows = []
    for s in steps:
        wall = s["end_ns"] - s["start_ns"]
        step_busy = covered_ns(ms, me, s["start_ns"], s["end_ns"])
        rows.append({"name": s["name"], "wall_ns": wall, "gpu_busy_ns": step_busy,
                     "gpu_busy_fraction": _ratio(step_busy, wall)})
    return window, rows


def header_facts(doc: dict, path: Path) -> dict:
    devices = doc.get("deviceProperties") or []
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    names = sorted({str(d.get("name")) for d in devices if isinstance(d, dict)} - {"", "None"})
    return {"file": path.name, "bytes_on_disk": path.stat().st_size, "device_names": names,
            "rank": dist.get("rank"), "world_size": dist.get("world_size"),
            "backend": dist.get("backend")}


def trace_facts(path: Path, gaps: int = 5) -> dict:
    """Every fact for one trace file (see the module docstring)."""
    doc = load_trace(path)
    events = complete_events(doc, path)
    gpu = [ev for ev in events if ev["cat"] in GPU_KINDS]
    time_ns = Counter()
    for ev in gpu:
        time_ns[GPU_KINDS[ev["cat"]]] += ev["end_ns"] - ev["ts_ns"]
    ms, me = merge_intervals([ev["ts_ns"] for ev in gpu], [ev["end_ns"] for ev in gpu])
    window, steps = window_facts(profiler_steps(events), ms, me)
    facts = header_facts(doc, path)
    facts.update({
        "events_by_category": dict(sorted(Counter(
            str(ev.get("cat", "(none)")) for ev in doc["traceEvents"] if isinstance(ev, dict)
        ).items())),
        "gpu_event_counts": dict(Counter(GPU_KINDS[ev["cat"]] for ev in gpu)),
        "gpu_time_ns": {k: time_ns.get(k, 0) for k in ("kernel", "memcpy", "memset")},
        "gpu_devices": sorted({str(ev["pid"]) for ev in gpu}),
        "cpu_ops_with_input_dims": sum(1 for ev in events if "Input Dims" in ev["args"]),
        "window": window, "steps": steps,
        "memcpy": memcpy_facts(gpu, sum(time_ns.values())),
        "launches": launch_facts(events, gpu),
        "communication_kernels": comm_kernels(gpu),
    })
    if "start_ns" in window:
        lo = window["start_ns"]
        facts["idle_gaps"] = idle_gaps(events, gpu, ms, me, (lo, lo + window["dur_ns"]), gaps)
    return facts


def trace_files(paths: list[Path]) -> list[Path]:
    """The given files, and every *.json / *.json.gz under the given folders."""
    out = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and f.name != "facts.json"
                          and ".profkit" not in f.parts  # profkit's own cache files
                          and (f.name.endswith(".json") or f.name.endswith(".json.gz")))
        else:
            out.append(p)
    return out


def summary_row(f: dict) -> str:
    """One markdown table cell of the headline facts of one trace."""
    w, la, mc = f["window"], f["launches"], f["memcpy"]["by_host_memory"]
    busy = w.get("gpu_busy_fraction")
    parts = [f"{w['source']}: {w.get('dur_ns', 0) / 1e6:.1f} ms, GPU busy "
             f"{'n/a' if busy is None else f'{busy:.0%}'}"]
    if f["steps"]:
        walls = [s["wall_ns"] / 1e6 for s in f["steps"]]
        parts.append(f"{len(walls)} steps, {min(walls):.1f}-{max(walls):.1f} ms")
    t = f["gpu_time_ns"]
    parts.append(f"kernel/memcpy/memset {t['kernel'] / 1e6:.1f}/{t['memcpy'] / 1e6:.1f}/"
                 f"{t['memset'] / 1e6:.1f} ms")
    if mc:
        parts.append("memcpy " + ", ".join(f"{k} {v['share_of_gpu_time']:.1%}"
                                           for k, v in mc.items()))
    parts.append(f"{la['launch_calls_total']} launches / {la['kernels']} kernels"
                 + (f" ({la['launch_calls_without_gpu_event']} launches without GPU event)"
                    if la["launch_calls_without_gpu_event"] else ""))
    graph = [k for k in ("graph_capture", "graph_launch") if la[k]]
    if graph:
        parts.append(" + ".join(graph).replace("_", " "))
    if f["communication_kernels"]:
        parts.append(f"{len(f['communication_kernels'])} comm kernel names")
    if f.get("idle_gaps"):
        g = f["idle_gaps"][0]
        top = next(iter(g["cpu_innermost_ns"]), "nothing recorded")
        parts.append(f"largest gap {g['dur_ns'] / 1e6:.2f} ms, CPU in `{top[:60]}`")
    return "; ".join(parts)


def write_atomic(path: Path, text: str) -> None:
    """Write whole or not at all: a temporary file beside the target, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="trace files or folders of traces")
    ap.add_argument("-o", "--out", type=Path, help="write the facts JSON here (else stdout)")
    ap.add_argument("--gaps", type=int, default=5, help="how many idle gaps to explain")
    ap.add_argument("--markdown", action="store_true", help="print one summary line per trace")
    args = ap.parse_args(argv)
    facts, errors = [], []
    for path in trace_files(args.paths):
        try:
            facts.append(trace_facts(path, args.gaps))
        except TraceError as exc:
            errors.append(str(exc))
            print(f"independent_check: {exc}", file=sys.stderr)
    if args.markdown:
        for f in facts:
            print(f"| {f['file']} | {summary_row(f)} |")
    elif facts:
        write_facts(facts, errors, args.out)
    return 1 if errors or not facts else 0


def write_facts(facts: list[dict], errors: list[str], out: Path | None) -> None:
    text = json.dumps({"checker": "bench/independent_check.py", "traces": facts,
                       "errors": errors}, indent=1) + "\n"
    if out:
        write_atomic(out, text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
