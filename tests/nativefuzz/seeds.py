"""Seeds for fuzzing the native Kineto reader: the first events of real traces, byte for
byte as the profiler wrote them (their numbers, escapes and spacing), in small files, and a
few hand-made events of the forms the native reader leaves to Python."""

from __future__ import annotations

from pathlib import Path

import msgspec

from profkit.trace.readlimit import read_trace_bytes

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (  # varied producers: NVIDIA and AMD, old and new Kineto, memory and counters
    "tests/data/public/amd_mi210_gpu_only/gpu_only_trace.json.gz",
    "tests/data/public/resnet50_nw0/worker0.1623143089861.pt.trace.json.gz",
    "tests/data/public/param_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz",
    "tests/data/public/sglang_decode_capture/bs_32_rank0.json.gz",
    "tests/data/public/hta_cupti_range/benchmark_result_924719_1679055439_trace.json.gz",
    "samples/runs/stock_ddp/rank0.1795306897953524574.pt.trace.json.gz",
    "samples/runs/memory/gpt_b32/traces/rank0.pt.trace.json.gz",
)
HAND_MADE = b"""{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H200"}],
"traceEvents": [
{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python3"}},
{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7, "ts": 10.5, "dur": 3,
 "args": {"External id": 4, "Input Dims": [[8, 16], [16, 4]], "Input type": ["float", "float"],
 "Sequence number": 3}},
{"ph": "X", "cat": "kernel", "name": "k\\u00e9rnel \\"q\\"", "pid": 0, "tid": "stream 7",
 "ts": 11.25, "dur": 1.5, "args": {"correlation": 9, "stream": 7, "device": 0}},
{"ph": "X", "cat": "cuda_runtime", "name": 17, "pid": 1, "tid": 7, "ts": 11, "dur": 1},
{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 7, "ts": 12,
 "dur": 2, "args": {"Collective name": "allreduce", "In msg nelems": 1024, "dtype": "Float"}},
{"ph": "X", "cat": "kernel", "name": "ncclKernel", "pid": 0, "tid": 7, "ts": 12.5, "dur": 1e1,
 "args": {"correlation": "10", "stream": 7}},
{"ph": "X", "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "pid": 0, "tid": 7, "ts": 13,
 "dur": 1, "args": {"bytes": 4096}},
{"ph": "i", "name": "[memory]", "pid": 1, "tid": 7, "ts": 13.5, "s": "t",
 "args": {"Addr": 1, "Bytes": 512, "Total Allocated": 512, "Total Reserved": 2048,
 "Device Id": 0, "Device Type": 1}},
{"ph": "i", "name": "[OutOfMemory]", "pid": 1, "tid": "7", "ts": 13.75, "s": "t",
 "args": {"Bytes": 8589934592, "Total Allocated": 512, "Total Reserved": 2048,
 "Device Id": 0, "Device Type": 1}},
{"ph": "C", "name": "gpu_util", "pid": 0, "ts": 14, "args": {"util": 50}},
{"ph": "s", "id": 9, "pid": 1, "tid": 7, "ts": 11, "cat": "ac2g", "name": "ac2g"},
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 7, "ts": 9,
 "dur": 100, "args": null},
[1, 2], 5, "x"
]}
"""


def seed_bytes(events_per_seed: int = 60) -> list[bytes]:
    """The seeds: the first ``events_per_seed`` events of each source, then HAND_MADE."""
    out = []
    decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
    for rel in SOURCES:
        raw = read_trace_bytes(ROOT / rel)
        doc = decoder.decode(raw)
        events = msgspec.json.decode(doc.pop("traceEvents"), type=list[msgspec.Raw])
        head = b",\n".join(b'"%s": %s' % (k.encode(), bytes(v)) for k, v in doc.items())
        body = b",\n".join(bytes(e) for e in events[:events_per_seed])
        out.append(b"{" + head + (b",\n" if head else b"") + b'"traceEvents": [\n' + body
                   + b"\n]}\n")
    out.append(HAND_MADE)
    return out


def write_seeds(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, raw in enumerate(seed_bytes()):
        path = folder / f"seed_{i}.json"
        path.write_bytes(raw)
        paths.append(path)
    return paths
