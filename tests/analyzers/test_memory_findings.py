"""What holds the memory peak (peak_live) and the allocator's findings (allocator): near
capacity, fragmentation, churn and out-of-memory.

On the real trace the expected figures come from the raw JSON alone (gzip + json): the
allocations and frees are paired by address in a plain dict, in time order, and the bytes
the trace never saw allocated are the total before its first event less the frees of
those blocks; the synthetic runs' numbers are chosen by hand."""

import gzip
import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.memoryjoin import batch_growth, join_headroom
from profkit.analyzers.findings.memoryrisks import allocator_findings
from profkit.analyzers.measure.peaklive import BEFORE_TRACE, FACTORY_OP_RE
from profkit.analyzers.measure.steps import CUT_REASON
from profkit.analyzers.report.render import to_json
from profkit.analyzers.report.render_text import to_text
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import DEFAULT

from profkit.run.loader import load_run
from tests.factories import (
    instant,
    kernel,
    launch,
    memory_event,
    step,
    trace_doc,
    write_trace,
    x,
)
from tests.realruns import sample_labels

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "runs" / "memory"
GB = 10**9


def _raw(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _windows(events: list[dict]) -> dict[int, tuple[float, float]]:
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
            and e.get("cat") != "gpu_user_annotation"}


def test_live_bytes_at_the_peak_add_up_to_the_allocators_total_on_gpt_b32():
    run = SAMPLES / "gpt_b32"
    a = analyze(load_run(run, cache=False))
    used = a.table("step_breakdown").query("used")["step"].tolist()
    events = _raw(next((run / "traces").glob("*.json.gz")))
    windows = _windows(events)
    mem = sorted((e for e in events if e.get("name") == "[memory]"
                  and e["args"]["Device Type"] == 1), key=lambda e: e["ts"])
    in_used = [i for i, e in enumerate(mem)
               if any(windows[s][0] <= e["ts"] < windows[s][1] for s in used)]
    p = max(in_used, key=lambda i: (mem[i]["args"]["Total Allocated"], -i))
    before = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    live: dict[int, int] = {}
    for e in mem[:p + 1]:
        addr, nbytes = e["args"]["Addr"], e["args"]["Bytes"]
        if nbytes > 0:
            live[addr] = nbytes
        elif addr in live:
            del live[addr]
        else:  # a block allocated before the trace
            before += nbytes
    total = mem[p]["args"]["Total Allocated"]
    assert sum(live.values()) + before == total  # the trace is whole: the pairing closes

    table = a.table("memory_live")
    assert int(table["live_bytes"].sum()) == total  # to the byte
    pre = table[table["op"] == BEFORE_TRACE]
    assert int(pre["live_bytes"].sum()) == before
    assert int(table[table["op"] != BEFORE_TRACE]["count"].sum()) == len(live)
    peak = a.table("memory_peak").iloc[0]
    assert int(peak["allocated_bytes"]) == total
    assert int(peak["reserved_bytes"]) == mem[p]["args"]["Total Reserved"]

    # the op running at the peak: the innermost CPU op of its thread around it, by hand
    around = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
              and e["tid"] == mem[p]["tid"] and e["ts"] <= mem[p]["ts"] <= e["ts"] + e["dur"]
              and not re.match(FACTORY_OP_RE, e["name"])]
    assert peak["op"] == max(around, key=lambda e: e["ts"])["name"]
    assert "At the peak" in to_text(a) and to_json(a)["memory_live"]


def _run(folder: Path, events: list, run_json: dict | None = None, cap: int = 80 * GB) -> Path:
    props = [{"id": 0, "name": "GPU", "totalGlobalMem": cap}]
    write_trace(folder / "rank0.pt.trace.json.gz",
                trace_doc(0, 1, events=events, deviceProperties=props))
    if run_json is not None:
        (folder / "run.json").write_text(json.dumps(run_json))
    return folder


def _steps(n: int, dur: float = 1000.0) -> list[dict]:
    """``n`` steps of ``dur`` us, each with one 400 us kernel launched 10 us in."""
    out = []
    for i in range(n):
        t0 = i * dur
        out += [step(i + 1, t0, dur), launch(t0 + 10, 5, corr=i + 1),
                kernel("gemm_kernel", t0 + 100, 400, corr=i + 1)]
    return out


def _categories(a) -> list[str]:
    return [f.category for f in a.findings]


def test_fragmentation_fires_when_reserved_is_far_above_allocated(tmp_path):
    events = _steps(3)
    for i in range(3):  # allocated peaks at 2 GB while the allocator reserves 5 GB
        t0 = i * 1000.0
        events += [memory_event(t0 + 20, 2 * GB, 2 * GB, 5 * GB, addr=1000 + i),
                   memory_event(t0 + 600, -2 * GB, 0, 5 * GB, addr=1000 + i)]
    a = analyze(load_run(_run(tmp_path / "frag", events), cache=False))
    frag = [f for f in a.findings if f.category == "fragmentation"]
    assert len(frag) == 1 and frag[0].evidence["giveback_bytes"] == 3 * GB
    assert "expandable_segments:True" in frag[0].recommendation

    calm = _steps(3)
    for i in range(3):  # reserved 1.1x allocated: no finding
        t0 = i * 1000.0
        calm += [memory_event(t0 + 20, 2 * GB, 2 * GB, 2.2 * GB, addr=1000 + i),
                 memory_event(t0 + 600, -2 * GB, 0, 2.2 * GB, addr=1000 + i)]
    a = analyze(load_run(_run(tmp_path / "calm", calm), cache=False))
    assert "fragmentation" not in _categories(a)


def test_near_capacity_names_what_holds_the_peak(tmp_path):
    events = _steps(3)
    for i in range(3):  # 75 of 80 GB: 94%; the op around the allocation is aten::mm
        t0 = i * 1000.0
        events += [x("aten::mm", "cpu_op", t0 + 15, 20),
                   memory_event(t0 + 20, 75 * GB, 75 * GB, 75 * GB, addr=1000 + i),
                   memory_event(t0 + 600, -75 * GB, 0, 75 * GB, addr=1000 + i)]
    a = analyze(load_run(_run(tmp_path / "near", events), cache=False))
    near = [f for f in a.findings if f.category == "near_capacity"]
    assert len(near) == 1 and "aten::mm (75.00 GB, 1)" in near[0].message


def test_empty_cache_every_step_is_churn_with_the_idle_time_it_costs(tmp_path):
    events = []
    for i in range(4):  # each step: 3 frees then 3 mallocs of 100 us, the GPU idle meanwhile
        t0 = i * 2000.0
        events += [step(i + 1, t0, 2000.0), launch(t0 + 10, 5, corr=i + 1),
                   kernel("gemm_kernel", t0 + 1200, 700, corr=i + 1)]
        for k in range(3):
            events.append(x("cudaFree", "cuda_runtime", t0 + 100 + 100 * k, 100))
            events.append(x("cudaMalloc", "cuda_runtime", t0 + 500 + 100 * k, 100))
    a = analyze(load_run(_run(tmp_path / "churn", events), cache=False))
    churn = [f for f in a.findings if f.category == "allocator_churn"]
    assert len(churn) == 1 and churn[0].evidence["empty_cache"]
    assert "torch.cuda.empty_cache()" in churn[0].recommendation
    assert churn[0].evidence["calls_per_step"] == 6
    # the GPU idles through the calls and the 100 us after each (no GPU work until 1200 us):
    # 100..500 and 500..900 us, 0.8 ms of a 2 ms step
    assert churn[0].evidence["idle_ms_per_step"] == pytest.approx(0.8)
    assert churn[0].estimated_saving["fraction"] == pytest.approx(0.4, abs=1e-3)
    # one cause, one finding: the slow runtime calls (100 us > 50 us) fold into it
    assert "runtime_calls" not in _categories(a)
    assert churn[0].evidence["runtime_calls"]["calls"] == {"cudaFree": 12, "cudaMalloc": 12}


def test_an_out_of_memory_in_the_last_step_is_named_and_left_out_of_the_timing(tmp_path):
    events = _steps(4)
    for i in range(4):  # the batch doubles: 10, 20, 40, then 70 GB before failing
        t0 = i * 1000.0
        size = [10, 20, 40, 70][i] * GB
        events.append(memory_event(t0 + 20, size, size, size, addr=1000 + i))
        if i < 3:
            events.append(memory_event(t0 + 600, -size, 0, size, addr=1000 + i))
    error = {"type": "OutOfMemoryError",
             "message": "CUDA out of memory. Tried to allocate 35.52 GiB. GPU 0 has ..."}
    run = _run(tmp_path / "oom", events, {"schema": "profkit.run/1", "status": "failed",
                                          "error": error, "world_size": 1})
    a = analyze(load_run(run, cache=False))
    steps = a.table("step_breakdown").set_index("step")
    assert not steps.loc[4, "used"] and steps.loc[4, "excluded_reason"] == CUT_REASON
    oom = [f for f in a.findings if f.category == "out_of_memory"]
    assert len(oom) == 1 and oom[0].step == 4
    assert oom[0].evidence["tried_bytes"] == pytest.approx(35.52 * 2**30)
    assert oom[0].evidence["last_alloc_bytes"] == 70 * GB
    assert "near_capacity" not in _categories(a)  # the OOM says it: one cause, one finding


def _summary(name: str) -> dict:
    return sample_labels(SAMPLES / "SUMMARY.txt")[name]


def test_the_batch_growth_saving_lands_near_the_measured_doubling():
    """gpt_b32 -> gpt_b64 on the H200: time per sample measured from the workloads' printed
    median steps, against the model's from gpt_b32's own GPU-busy share."""
    b32, b64 = _summary("memory_gpt_b32"), _summary("memory_gpt_b64")
    measured = 1 - (b64["median_step_ms"] / 64) / (b32["median_step_ms"] / 32)
    a = analyze(load_run(SAMPLES / "gpt_b32", cache=False))
    row = a.table("rank_breakdown").iloc[0]
    busy = float(row["compute"] + row["communication"] + row["memcpy"])
    k, saving = batch_growth(33.0, busy)
    assert k == 2
    assert abs(saving - measured) < 0.05  # measured 0.155


def test_a_launch_bound_rank_with_headroom_is_told_to_raise_the_batch():
    head = Finding(category="allocations", severity="info", rank=0, message="m",
                   recommendation="r", evidence={"batch_headroom_x": 10.0})
    ranks = pd.DataFrame([{"rank": 0, "primary": "cpu_launch", "step_time_ms": 10.0,
                           "compute": 0.3, "communication": 0.0, "memcpy": 0.0}])
    (joined,) = join_headroom([head], ranks)
    # GPU busy 30%: 4x the batch makes the GPU the bound (1/0.3 = 3.3); 1 - max(1/4, 0.3)
    assert joined.evidence["batch_growth_x"] == 4
    assert joined.estimated_saving["fraction"] == pytest.approx(0.7)
    assert "4x the batch" in joined.recommendation
    computing = ranks.assign(primary="compute")
    (kept,) = join_headroom([head], computing)
    assert kept is head  # compute-bound: the headroom finding stays as it was
    launch = replace(head, category="cpu_launch", evidence={})  # launches charged, not primary
    small, _ = join_headroom([head, launch], computing)
    assert small.evidence["batch_growth_x"] == 4
    (tight,) = join_headroom([replace(head, evidence={"batch_headroom_x": 2.5})], ranks)
    assert tight.evidence["batch_growth_x"] == 2  # no more than the memory allows


def test_the_memory_table_keeps_the_thread_of_each_event():
    run = SAMPLES / "gpt_b32"
    mem = load_run(run, cache=False).ranks[0].table("memory")
    raw = sorted((e for e in _raw(next((run / "traces").glob("*.json.gz")))
                  if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    assert sorted(mem["tid"].tolist()) == sorted(e["tid"] for e in raw)
    assert len(set(mem["tid"])) == 2  # the main thread and autograd's backward thread


def _why(name: str) -> dict:
    return sample_labels(SAMPLES.parent / "why" / "SUMMARY.txt")[name]


def test_a_launch_bound_gpt_is_told_to_raise_the_batch_as_much_as_measured():
    """why/gpt_b8 is launch-bound with room for a far larger batch; its twin why/gpt_b32 ran
    4x the batch: the time per sample the workloads printed (median steps) against the
    headroom finding's saving."""
    b8, b32 = _why("why_gpt_b8"), _why("why_gpt_b32")
    measured = 1 - (b32["median_step_ms"] / 32) / (b8["median_step_ms"] / 8)  # 0.78
    a = analyze(load_run(SAMPLES.parent / "why" / "gpt_b8", cache=False))
    assert a.verdict["primary"] == "cpu_launch"
    (head,) = [f for f in a.findings if f.category == "allocations"]
    assert head.evidence["batch_growth_x"] == 4
    assert abs(head.estimated_saving["fraction"] - measured) < 0.15
    assert "4x the batch" in head.recommendation


def test_the_traces_own_failed_allocation_names_the_step_without_an_error_record(tmp_path):
    """A job that catches its OOM writes no error record; Kineto's [OutOfMemory] instant
    (the size asked for, the totals then, no address) still names the step."""
    events = _steps(4)
    for i in range(3):
        t0 = i * 1000.0
        events += [memory_event(t0 + 20, GB, GB, GB, addr=1000 + i),
                   memory_event(t0 + 600, -GB, 0, GB, addr=1000 + i)]
    events += [memory_event(2030.0, 5 * GB, 6 * GB, 6 * GB, addr=7),  # step 3, live
               instant("[OutOfMemory]", 2040.0, **{
                   "Bytes": 90 * GB, "Total Allocated": 6 * GB, "Total Reserved": 6 * GB,
                   "Device Id": 0, "Device Type": 1})]
    a = analyze(load_run(_run(tmp_path / "caught", events), cache=False))
    (oom,) = [f for f in a.findings if f.category == "out_of_memory"]
    assert oom.step == 3 and oom.evidence["tried_bytes"] == 90 * GB
    assert oom.evidence["last_alloc_bytes"] == 5 * GB and oom.evidence["source"] == "trace"
    steps = a.table("step_breakdown").set_index("step")
    assert steps.loc[3, "excluded_reason"] == CUT_REASON
    # the failed request is no allocation: the peaks of the used steps stay 1 GB
    assert a.table("memory_ranks")["peak_allocated_bytes"].tolist() == [GB]


# --- the H200 captures of issue 38 (samples/runs/memory, labels in its SUMMARY.txt) --------

CAPTURES = ("varlen_default", "varlen_expandable", "empty_cache", "no_empty_cache", "grow_oom")


def _label(name: str) -> dict:
    return _summary(f"memory_{name}")


def _analysed(name: str):
    return analyze(load_run(SAMPLES / name, cache=False))


@pytest.mark.parametrize("name", CAPTURES)
def test_the_step_peaks_of_the_captures_match_the_allocators_own_numbers(name):
    """Each step's peak allocated and reserved against torch.cuda.max_memory_allocated()
    and memory_reserved() printed by the workload after that step (reset before it)."""
    label, a = _label(name), _analysed(name)
    steps = a.table("memory")
    steps = steps[steps["used"]]
    assert len(steps) >= 2
    for row in steps.to_dict("records"):
        s = int(row["step"])
        assert row["peak_allocated_bytes"] == pytest.approx(label["peak_allocated_bytes"][s],
                                                            rel=0.02)
        assert row["peak_reserved_bytes"] == pytest.approx(label["peak_reserved_bytes"][s],
                                                           rel=0.02)
    live = a.table("memory_live")  # what holds the peak adds up to it
    peak = a.table("memory_peak").iloc[0]
    assert int(live["live_bytes"].sum()) == int(peak["allocated_bytes"])


def test_fragmentation_fires_with_the_default_allocator_and_not_with_expandable_segments():
    default, expandable = _analysed("varlen_default"), _analysed("varlen_expandable")
    (frag,) = [f for f in default.findings if f.category == "fragmentation"]
    assert "fragmentation" not in _categories(expandable)
    # the bytes it says would come back, against what expandable_segments gave back (the
    # largest reserved each workload printed), as shares of the default's reserved
    before = max(_label("varlen_default")["peak_reserved_bytes"])
    after = max(_label("varlen_expandable")["peak_reserved_bytes"])
    measured = (before - after) / before  # 0.28
    assert abs(frag.evidence["giveback_bytes"] / before - measured) < 0.15


def test_empty_cache_in_the_loop_is_named_with_the_time_its_twin_saves():
    cached, twin = _analysed("empty_cache"), _analysed("no_empty_cache")
    (churn,) = [f for f in cached.findings if f.category == "allocator_churn"]
    assert churn.evidence["empty_cache"] and "empty_cache()" in churn.recommendation
    assert "allocator_churn" not in _categories(twin)
    measured = 1 - (_label("no_empty_cache")["median_step_ms"]
                    / _label("empty_cache")["median_step_ms"])  # 0.43
    assert abs(churn.estimated_saving["fraction"] - measured) < 0.15
    # one cause, one finding: the launch overhead it causes and its slow calls are its own
    cats = _categories(cached)
    assert "cpu_launch" not in cats and "runtime_calls" not in cats
    assert "cpu_launch" in churn.evidence
    (head,) = [f for f in cached.findings if f.category == "allocations"]
    assert head.estimated_saving is None  # no raise-the-batch advice for the same idle time


def test_the_out_of_memory_step_is_named_and_not_timed():
    label, a = _label("grow_oom"), _analysed("grow_oom")
    (oom,) = [f for f in a.findings if f.category == "out_of_memory"]
    assert oom.step == label["oom_step"]
    tried = re.search(r"Tried to allocate ([\d.]+) GiB", label["oom_message"]).group(1)
    assert oom.evidence["tried_bytes"] == pytest.approx(float(tried) * 2**30)
    steps = a.table("step_breakdown").set_index("step")
    assert not steps.loc[label["oom_step"], "used"]
    assert steps.loc[label["oom_step"], "excluded_reason"] == CUT_REASON
    assert steps["used"].sum() == len(steps) - 1
    assert "allocator_churn" not in _categories(a)  # its retries are the OOM's evidence


def test_near_capacity_on_the_step_before_the_oom_names_its_largest_holders():
    """grow_oom's step 3 reserved 142.6 of 150.1 GB (95%, the workload's own numbers); with
    the out-of-memory set aside, the near-capacity finding names what held that peak."""
    a = _analysed("grow_oom")
    label = _label("grow_oom")
    result = Result(tables={"memory_oom": a.table("memory_oom").iloc[:0],
                            "allocator_calls": a.table("allocator_calls")},
                    facts={"ranks": a.table("memory_ranks"), "live": a.table("memory_live"),
                           "peak": a.table("memory_peak"), "step_ms": {}})
    found = allocator_findings(result, DEFAULT)
    (near,) = [f for f in found if f.category == "near_capacity"]
    assert near.evidence["peak_reserved_bytes"] == label["peak_reserved_bytes"][3]
    live = a.table("memory_live").nlargest(1, "live_bytes").iloc[0]
    assert live["op"] in near.message and live["op"] == "aten::mm"


def test_an_allocation_is_charged_to_the_innermost_op_that_is_not_a_factory(tmp_path):
    """aten::linear and aten::addmm start together (the inner one shorter); the allocation
    inside aten::empty inside them belongs to aten::addmm."""
    events = _steps(3)
    for i in range(3):
        t0 = i * 1000.0
        events += [x("aten::linear", "cpu_op", t0 + 15, 40),
                   x("aten::addmm", "cpu_op", t0 + 15, 30),
                   x("aten::empty", "cpu_op", t0 + 18, 4),
                   x("my_block", "user_annotation", t0 + 12, 60),
                   memory_event(t0 + 20, GB, GB, GB, addr=1000 + i),
                   memory_event(t0 + 600, -GB, 0, GB, addr=1000 + i)]
    a = analyze(load_run(_run(tmp_path / "nested", events), cache=False))
    live = a.table("memory_live")
    assert live[["op", "annotation", "live_bytes", "count"]].values.tolist() == [
        ["aten::addmm", "my_block", GB, 1]]
    assert a.table("memory_peak")["op"].tolist() == ["aten::addmm"]


def test_fragmentation_that_brings_a_rank_near_capacity_is_one_finding(tmp_path):
    events = _steps(3)
    for i in range(3):  # 70 GB in tensors, 140 of 150 GB reserved (93%, 2x)
        t0 = i * 1000.0
        events += [memory_event(t0 + 20, 70 * GB, 70 * GB, 140 * GB, addr=1000 + i),
                   memory_event(t0 + 600, -70 * GB, 0, 140 * GB, addr=1000 + i)]
    a = analyze(load_run(_run(tmp_path / "both", events, cap=150 * GB), cache=False))
    cats = _categories(a)
    assert "near_capacity" in cats and "fragmentation" not in cats
    (near,) = [f for f in a.findings if f.category == "near_capacity"]
    assert near.evidence["fragmentation"]["giveback_bytes"] == 70 * GB
    assert "expandable_segments:True" in near.recommendation
    assert "Up to 70.0 GB would come back" in near.recommendation


def test_the_out_of_memory_is_found_once_per_rank_and_the_same_either_way(tmp_path, monkeypatch):
    """rank_oom (read by the breakdown and by the allocator measurement) runs oom_cut once
    in a sharing block, and gives what it gives outside one; other run facts: found again."""
    from profkit.analyzers.measure import allocator

    events = _steps(2)
    events.append(memory_event(1020, 70 * GB, 70 * GB, 70 * GB, addr=7))
    error = {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 2 GiB."}
    meta = {"schema": "profkit.run/1", "status": "failed", "error": error, "world_size": 1}
    rank = load_run(_run(tmp_path / "oom", events, meta), cache=False).ranks[0]
    calls = []
    counted = allocator.oom_cut
    monkeypatch.setattr(allocator, "oom_cut", lambda *a: calls.append(1) or counted(*a))
    alone = allocator.rank_oom(rank, meta, 0.9)
    assert alone["source"] == "error" and alone["tried_bytes"] == 2 * 2**30 and len(calls) == 1
    with rank.sharing_selections():
        first = allocator.rank_oom(rank, meta, 0.9)
        assert allocator.rank_oom(rank, dict(meta), 0.9) == first == alone and len(calls) == 2
        assert allocator.rank_oom(rank, {**meta, "error": {}}, 0.9) is None and len(calls) == 3
