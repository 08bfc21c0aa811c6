"""The H200 memory samples (samples/runs/memory: GPT at batch 32 and 64, each step
labelled by the workload with torch.cuda.max_memory_allocated() and memory_reserved()),
their labels read from SUMMARY.txt, the raw trace's own [memory] events, and a copy of a run
without them (as a capture with profile_memory=False) for the tests of the memory outputs."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from tests.conftest import REPO
from tests.realruns import sample_labels

MEMORY = REPO / "samples" / "runs" / "memory"


def labels() -> dict[str, dict]:
    """The workload's own numbers per run (SUMMARY.txt's PROFKIT_SAMPLE lines), by run name
    (``gpt_b32``)."""
    return {name.removeprefix("memory_"): doc
            for name, doc in sample_labels(MEMORY / "SUMMARY.txt").items()}


def steady_peak(run: str, key: str) -> int:
    """The label of the steps after the first (the first allocates the optimizer state and
    is lower; every later step reads the same)."""
    values = labels()[run][key][1:]
    assert len(set(values)) == 1
    return values[0]


def raw_trace(run: str, rank: int = 0) -> dict:
    return json.loads(gzip.decompress(
        (MEMORY / run / "traces" / f"rank{rank}.pt.trace.json.gz").read_bytes()))


def raw_cuda_memory_events(doc: dict) -> list[dict]:
    """The trace's CUDA [memory] instants (Device Type 1), in time order."""
    return sorted((e for e in doc["traceEvents"] if e.get("name") == "[memory]"
                   and e.get("ph") == "i" and e["args"]["Device Type"] == 1),
                  key=lambda e: e["ts"])


def without_memory_events(src: Path, dst: Path) -> Path:
    """A copy of a run whose traces hold no [memory] events (as profile_memory=False)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".profkit"))
    for trace in (dst / "traces").glob("*.json.gz"):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        kept = [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]
        assert len(kept) < len(doc["traceEvents"])
        doc["traceEvents"] = kept
        trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst
