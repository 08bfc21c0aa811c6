"""profkit merge writes the allocator's memory as counter tracks beside each rank's GPU.

Checked against the raw trace JSON of the H200 memory samples (tests/memory_samples.py) and
the workload's labels: the allocated track's highest point is the trace's highest
``Total Allocated`` (the label's peak), at the same instant on the merged clock, in the GPU's
process; thinning keeps that point when a series is longer than the limit; a run without
[memory] events gets no such track."""

import gzip
import json

import numpy as np
import pytest

from profkit.run.loader import load_run
from profkit.timeline import memorytracks
from profkit.timeline.memorytracks import peak_keeping
from profkit.timeline.merge import Window, merge_run
from tests.conftest import CORPUS
from tests.factories import BASE_NS, memory_event, step, trace_doc, write_trace
from tests.memory_samples import (
    MEMORY,
    raw_cuda_memory_events,
    raw_trace,
    steady_peak,
    without_memory_events,
)

TRACKS = ("allocated_bytes", "reserved_bytes")


def merged(run, out):
    merge_run(load_run(run, cache=False), out)
    return json.loads(gzip.decompress(out.read_bytes()))


def tracks(doc) -> dict[str, list[dict]]:
    return {name: [e for e in doc["traceEvents"] if e.get("ph") == "C" and e["name"] == name]
            for name in TRACKS}


@pytest.mark.parametrize("run", ["gpt_b32", "gpt_b64"])
def test_the_tracks_peak_is_the_traces_and_the_labels(tmp_path, run):
    doc = merged(MEMORY / run, tmp_path / "m.json.gz")
    raw = raw_trace(run)
    events = raw_cuda_memory_events(raw)
    got = tracks(doc)
    for name, key, label in (("allocated_bytes", "Total Allocated", "peak_allocated_bytes"),
                             ("reserved_bytes", "Total Reserved", "peak_reserved_bytes")):
        series = got[name]
        assert len(series) == len(events)  # under the limit: every event is a point
        top = max(series, key=lambda e: e["args"][name])
        assert top["args"][name] == max(e["args"][key] for e in events) \
            == steady_peak(run, label)
        # on the merged clock: the same absolute time as the raw event of that value
        first_raw = next(e for e in events if e["args"][key] == top["args"][name])
        assert round(doc["baseTimeNanoseconds"] + top["ts"] * 1000) == \
            pytest.approx(raw["baseTimeNanoseconds"] + first_raw["ts"] * 1000, abs=1)
    gpu_pids = {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    assert {e["pid"] for s in got.values() for e in s} <= gpu_pids and gpu_pids


def test_a_window_keeps_the_memory_points_inside_it(tmp_path):
    """--steps / a window: the tracks hold the events of the window only (on the absolute
    clock: the raw trace's base time plus its ts)."""
    raw = raw_trace("gpt_b32")
    base = raw["baseTimeNanoseconds"]
    events = raw_cuda_memory_events(raw)
    at = [base + round(e["ts"] * 1000) for e in events]
    lo, hi = at[len(at) // 3], at[2 * len(at) // 3]
    inside = [e for e, t in zip(events, at) if lo <= t < hi]
    out = tmp_path / "m.json.gz"
    merge_run(load_run(MEMORY / "gpt_b32", cache=False), out, window=Window(lo, hi))
    doc = json.loads(gzip.decompress(out.read_bytes()))
    series = tracks(doc)["allocated_bytes"]
    assert len(series) == len(inside) > 0
    times = [doc["baseTimeNanoseconds"] + e["ts"] * 1000 for e in series]
    assert lo - 1 <= min(times) and max(times) < hi + 1
    assert max(e["args"]["allocated_bytes"] for e in series) == \
        max(e["args"]["Total Allocated"] for e in inside)


def test_a_thinned_series_keeps_its_peak_ends_and_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(memorytracks, "MAX_POINTS", 200)
    doc = merged(MEMORY / "gpt_b64", tmp_path / "m.json.gz")
    events = raw_cuda_memory_events(raw_trace("gpt_b64"))
    series = tracks(doc)["allocated_bytes"]
    assert 100 < len(series) <= 200 < len(events)
    values = [e["args"]["allocated_bytes"] for e in series]
    raw = [e["args"]["Total Allocated"] for e in events]
    assert max(values) == max(raw) == steady_peak("gpt_b64", "peak_allocated_bytes")
    assert min(values) == min(raw) and (values[0], values[-1]) == (raw[0], raw[-1])
    assert [e["ts"] for e in series] == sorted(e["ts"] for e in series)


def test_a_run_of_25000_events_stays_small_and_keeps_its_one_spike(tmp_path):
    n, spike = 25_000, 12_345
    gib = 1 << 30
    rng = np.random.default_rng(0)
    allocated = (2 * gib + rng.integers(0, gib, n)).tolist()
    allocated[spike] = 40 * gib  # one short-lived allocation, a single point high
    events = [step(1, 0.0, 30_000.0)]
    events += [memory_event(1.0 + i, 512, a, 48 * gib) for i, a in enumerate(allocated)]
    write_trace(tmp_path / "run" / "traces" / "rank0.pt.trace.json.gz",
                trace_doc(0, 1, events=events))
    doc = merged(tmp_path / "run", tmp_path / "m.json.gz")
    series = tracks(doc)["allocated_bytes"]
    assert len(series) <= memorytracks.MAX_POINTS
    values = [e["args"]["allocated_bytes"] for e in series]
    assert max(values) == 40 * gib
    top = series[values.index(40 * gib)]
    assert doc["baseTimeNanoseconds"] + round(top["ts"] * 1000) == BASE_NS + (1 + spike) * 1000
    assert min(values) == min(allocated)
    assert len(tracks(doc)["reserved_bytes"]) <= memorytracks.MAX_POINTS


BIG = CORPUS / "hta" / "df_index_resolver"  # a public trace: 26,770 CUDA [memory] events


@pytest.mark.skipif(not BIG.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_a_real_trace_of_26770_memory_events_keeps_its_peaks_in_2000_points(tmp_path):
    raw = json.loads(gzip.decompress((BIG / "df_index_resolver.json.gz").read_bytes()))
    events = [e for e in raw["traceEvents"] if e.get("name") == "[memory]"
              and e["args"].get("Device Type") == 1]
    assert len(events) == 26_770
    got = tracks(merged(BIG, tmp_path / "m.json.gz"))
    for name, key in (("allocated_bytes", "Total Allocated"), ("reserved_bytes", "Total Reserved")):
        series = got[name]
        assert 1000 < len(series) <= memorytracks.MAX_POINTS
        assert max(e["args"][name] for e in series) == max(e["args"][key] for e in events)
        assert min(e["args"][name] for e in series) == min(e["args"][key] for e in events)


def test_a_run_without_memory_events_gets_no_memory_track(tmp_path):
    run = without_memory_events(MEMORY / "gpt_b32", tmp_path / "bare")
    doc = merged(run, tmp_path / "m.json.gz")
    assert tracks(doc) == {name: [] for name in TRACKS}
    assert any(e.get("cat") == "kernel" for e in doc["traceEvents"])  # the rest is there


def test_peak_keeping_keeps_each_buckets_extremes_and_nothing_when_short():
    ts = np.arange(10_000, dtype=np.int64) * 1000
    values = np.sin(np.arange(10_000) / 50.0) * 1e9
    values[7_777] = 5e9
    values[3_333] = -5e9
    kept = peak_keeping(ts, values, 400)
    assert len(kept) <= 400 and np.all(np.diff(kept) > 0)
    assert {0, 3_333, 7_777, 9_999} <= set(kept.tolist())
    # per 100-bucket's time span, the bucket's own highest and lowest points are there
    for b in range(100):
        lo, hi = b * 100, (b + 1) * 100
        inside = kept[(kept >= lo) & (kept < hi)]
        assert values[inside].max() == values[lo:hi].max()
        assert values[inside].min() == values[lo:hi].min()
    assert peak_keeping(ts[:50], values[:50], 400).tolist() == list(range(50))
    same = peak_keeping(np.zeros(5_000, np.int64), np.arange(5_000), 40)  # one instant
    assert len(same) <= 40 and same[-1] == 4_999
