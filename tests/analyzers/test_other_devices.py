"""Other devices and older formats (issue 40, item 5), on real traces.

- tests/data/public/hta_mtia_inference: Meta MTIA inference (HTA's test data, MIT): its
  1,313 ``mtia_ccp_events`` are device activity, not a CPU-only trace; the device has no
  peak table, and still gets its breakdown.
- tests/data/legacy_autograd: a legacy autograd-profiler export (a JSON array, no ``cat``):
  read as the CPU-only trace it is, not refused.
"""

from __future__ import annotations

import collections
import gzip
import json

import pytest

from tests.analysed import analysed
from tests.conftest import REPO

MTIA = REPO / "tests" / "data" / "public" / "hta_mtia_inference"
LEGACY = REPO / "tests" / "data" / "legacy_autograd"


def union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def test_mtia_device_events_are_device_activity():
    with gzip.open(MTIA / "mtia_inference_rank_0.json.gz") as f:
        events = json.load(f)["traceEvents"]
    device = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "mtia_ccp_events"]
    assert len(device) == 1313
    window_us = max(hi for _, hi in device) - min(lo for lo, _ in device)
    busy = union_us(device) / window_us  # independent: the union of the device's events
    a = analysed(MTIA)
    assert a.verdict["primary"] == "compute"  # was: no verdict, "a CPU-only trace"
    messages = " ".join(f.message for f in a.findings)
    assert "CPU-only" not in messages
    steps = a.table("step_breakdown")
    assert steps["step_ns"].sum() / 1e3 == pytest.approx(window_us, rel=1e-3)
    assert a.verdict["fractions"]["compute"] == pytest.approx(busy, abs=0.01)
    kernels = a.table("used_step_kernels").set_index("name")["count"]
    names = collections.Counter(e["name"] for e in events if e.get("cat") == "mtia_ccp_events")
    assert kernels.to_dict() == dict(names)


def test_legacy_autograd_export_reads_as_a_cpu_only_trace():
    doc = json.loads((LEGACY / "legacy_autograd_cpu.json").read_text())
    assert isinstance(doc, list) and not any("cat" in e for e in doc)
    ops = collections.Counter(e["name"] for e in doc)
    a = analysed(LEGACY)
    assert a.verdict["primary"] is None
    messages = " ".join(f.message for f in a.findings)
    assert "CPU-only" in messages  # said plainly, not refused as "not a PyTorch trace?"
    top = a.table("top_ops").set_index("name")
    addmm_ns = sum(e["dur"] for e in doc if e["name"] == "aten::addmm") * 1e3
    assert top.loc["aten::addmm", "count"] == ops["aten::addmm"] == 6
    assert top.loc["aten::addmm", "total_ns"] == pytest.approx(addmm_ns, abs=6)
