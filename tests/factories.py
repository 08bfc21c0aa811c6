"""Tiny hand-built Kineto traces for tests. Every number here is chosen by hand so tests
can state expected results without running profkit to get them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE_NS = 1_700_000_000_000_000_000  # baseTimeNanoseconds of the synthetic traces


def x(name, cat, ts, dur, pid=100, tid=100, **args):
    ev = {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if args:
        ev["args"] = dict(args)
    return ev


def instant(name, ts, pid=100, tid=100, scope="t", cat="cpu_instant_event", **args):
    """An instant ('i') event at ``ts`` µs: a point in time, no duration (Kineto writes its
    ``[memory]`` allocations this way); ``scope``: "t" thread, "p" process, "g" global."""
    ev = {"ph": "i", "name": name, "cat": cat, "ts": ts, "pid": pid, "tid": tid, "s": scope}
    if args:
        ev["args"] = dict(args)
    return ev


def memory_event(ts, nbytes, allocated, reserved, device=0, device_type=1, addr=1 << 40,
                 pid=100, tid=100):
    """One allocation (``nbytes`` > 0) or free (< 0) of PyTorch's caching allocator as
    Kineto writes it with profile_memory=True: a ``[memory]`` instant whose totals are the
    allocator's after it; ``device_type`` 1 is CUDA, 0 the CPU (device -1)."""
    return instant("[memory]", ts, pid=pid, tid=tid, **{
        "Total Reserved": reserved, "Total Allocated": allocated, "Bytes": nbytes,
        "Device Id": device, "Device Type": device_type, "Addr": addr})


def counter(name, ts, pid=100, tid=0, **series):
    """A counter ('C') event: the value of each series (keyword: value) at ``ts`` µs;
    Chrome's format gives counters a name and args, no category or duration."""
    return {"ph": "C", "name": name, "ts": ts, "pid": pid, "tid": tid, "args": dict(series)}


def kernel(name, ts, dur, corr, stream=7, device=0, **args):
    return x(name, "kernel", ts, dur, pid=device, tid=stream, correlation=corr, stream=stream,
             device=device, **args)


def launch(ts, dur, corr, tid=100):
    return x("cudaLaunchKernel", "cuda_runtime", ts, dur, pid=100, tid=tid, correlation=corr)


def step(n, ts, dur):
    return x(f"ProfilerStep#{n}", "user_annotation", ts, dur)


def two_step_events(rank: int = 0) -> list[dict]:
    """Two steps of 1000 us each on rank ``rank`` (µs, relative to BASE_NS):

    step 1 [0, 1000): gemm kernel 100..500 (launched at 50), NCCL all_reduce 500..800
                      (launched at 60, 4096 float elements = 16384 bytes), memcpy HtoD 800..850
    step 2 [1000, 2000): elementwise kernel 1100..1300 (launched at 1050)
    """
    return [
        step(1, 0.0, 1000.0),
        step(2, 1000.0, 1000.0),
        launch(50.0, 5.0, corr=1),
        launch(60.0, 5.0, corr=2),
        launch(70.0, 5.0, corr=3),
        launch(1050.0, 5.0, corr=4),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 100.0, 400.0, corr=1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 500.0, 300.0, corr=2, stream=20,
               **{"Collective name": "allreduce", "In msg nelems": 4096, "Out msg nelems": 4096,
                  "dtype": "Float", "Group size": 2, "Process Group Name": "0",
                  "Process Group Ranks": "[0, 1]", "Seq": 7}),
        x("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 800.0, 50.0, pid=0, tid=7,
          correlation=3, stream=7, device=0, bytes=1 << 20),
        kernel("void at::native::vectorized_elementwise_kernel<4>", 1100.0, 200.0, corr=4),
        {"ph": "s", "id": 1, "pid": 100, "tid": 100, "ts": 50.0, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 100.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]


def trace_doc(rank: int | None = 0, world_size: int = 2, events=None, base_ns: int = BASE_NS,
              **extra) -> dict:
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": base_ns,
           "traceEvents": events if events is not None else two_step_events(rank or 0)}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
    doc.update(extra)
    return doc


def write_trace(path: Path, doc: dict) -> Path:
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def outside_link_run(tmp_path) -> tuple[Path, Path]:
    """(run, outside): a folder of one rank's trace (itself a link that stays inside the
    folder) and rank1.json, a link to ``outside``, another job's trace elsewhere."""
    outside = write_trace(tmp_path / "elsewhere" / "trace.json",
                          trace_doc(None, events=two_step_events(0) + [
                              kernel("someone_elses_kernel", 300.0, 50.0, corr=99)]))
    run = tmp_path / "run"
    write_trace(run / ".store" / "trace0.json", trace_doc(0, 1))  # .store: never searched
    (run / "rank0.json").symlink_to(".store/trace0.json")  # a link inside: read
    (run / "rank1.json").symlink_to(outside)
    return run, outside
