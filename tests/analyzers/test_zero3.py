"""DeepSpeed ZeRO-3 recognition (measure/zero3.py, report/zero3_section.py) on the real
DeepSpeed 0.19.8 capture samples/runs/parallel/zero3_default (2 x H200, NCCL, the sample GPT
of 8 blocks, dim 1024, bf16), checked against the workload's own labels (SUMMARY.txt: its
parameters, and those under stage3_param_persistence_threshold) and against the c10d
operators counted in the raw trace JSON here."""

from __future__ import annotations

import gzip
import json
import math
from functools import cache

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.zero3 import ADVICE, ADVICE_NO_FETCH, zero3_host
from profkit.analyzers.measure import dimensions as D
from profkit.analyzers.measure.zero3 import CALLS_TABLE, RANKS_TABLE, call_elements
from profkit.analyzers.report.zero3_section import zero3_section
from profkit.analyzers.result import Finding

from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.realruns import sample_labels

PARALLEL = REPO / "samples" / "runs" / "parallel"
CASES = ("zero3_default",)


@cache
def _analysis(name: str):
    return analyze(load_run(PARALLEL / name, cache=False))


def _labels(name: str) -> dict:
    return sample_labels(PARALLEL / "SUMMARY.txt")[name]


def _raw_events(name: str, rank: int) -> list[dict]:
    doc = json.loads(gzip.decompress(
        (PARALLEL / name / "traces" / f"rank{rank}.pt.trace.json.gz").read_bytes()))
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _after_profiler_ms(name: str) -> float:
    """The workload's own step time once the profiler stopped: rank 0's CUDA-event steps
    5-9 (2-3 profiled, 4 the profiler's flush), their median."""
    return float(np.median(_labels(name)["step_ms_per_rank"][0][5:10]))


def _raw_calls(name: str, rank: int) -> dict[str, list[int]]:
    """Per c10d operator, the elements of every call inside a ProfilerStep range (the
    largest argument's product of dims), read from the JSON here."""
    doc = json.loads(gzip.decompress(
        (PARALLEL / name / "traces" / f"rank{rank}.pt.trace.json.gz").read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#")]
    out: dict[str, list[int]] = {}
    for e in events:
        if e["name"] in ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_") and any(
                lo <= e["ts"] <= hi for lo, hi in steps):
            sizes = [math.prod(d) for d in e["args"]["Input Dims"] if d]
            out.setdefault(e["name"], []).append(max(sizes))
    return out


@pytest.mark.parametrize("name", CASES)
def test_zero3_calls_follow_the_models_parameters(name):
    """Forward: the sharded parameters gathered (all of them, once, in buckets of
    stage3_prefetch_bucket_size 5e7 elements: 3 calls for 1.1e8); after the optimizer step:
    the persistent ones, one call each; one reduce-scatter of every gradient (the whole model
    is under reduce_bucket_size 5e8)."""
    lab = _labels(name)
    assert lab["zero_config"]["reduce_bucket_size"] == 500_000_000
    bucket = lab["zero_config"]["stage3_prefetch_bucket_size"]
    sharded = lab["param_numel"] - lab["persistent_numel"]
    t = _analysis(name).table(RANKS_TABLE).set_index("rank")
    assert sorted(t.index) == [0, 1]
    for rank in (0, 1):
        r = t.loc[rank]
        assert r["all_gather_elements_forward"] == sharded == 109_576_192
        assert r["all_gathers_forward"] == math.ceil(sharded / bucket) == 3
        assert r["all_gathers_after_backward"] == lab["persistent_params"] == 34
        assert r["all_gather_elements_after_backward"] == lab["persistent_numel"]
        assert r["all_gathers_backward"] == 0  # nothing released: max_live 1e9 holds them
        assert r["reduce_scatters"] == 1
        assert r["reduce_scatter_elements"] == lab["param_numel"]
        assert 0 < r["exposed_comm_ms_per_step"] < r["step_ms"]


@pytest.mark.parametrize("name", CASES)
def test_counts_and_sizes_equal_the_raw_trace(name):
    a = _analysis(name)
    t = a.table(RANKS_TABLE).set_index("rank")
    calls = a.table(CALLS_TABLE)
    for rank in (0, 1):
        raw = _raw_calls(name, rank)
        steps = t.loc[rank, "steps"]
        gathers = raw["c10d::_allgather_base_"]
        per_step = sum(t.loc[rank, f"all_gathers_{p}"]
                       for p in ("forward", "backward", "after_backward"))
        assert per_step * steps == len(gathers)
        mine = calls[(calls["rank"] == rank) & (calls["kind"] == "all_gather")]
        assert (mine["elements"] * mine["calls_per_step"]).sum() * steps == sum(gathers)
        assert t.loc[rank, "all_gather_max_elements"] == max(gathers)
        assert t.loc[rank, "reduce_scatters"] * steps == len(raw["c10d::_reduce_scatter_base_"])


def test_hooked_module_forwards_are_every_module_of_the_gpt():
    """77 modules in the sample GPT of 8 blocks: the GPT, 2 embeddings, 8 x 9 in each block
    (the block, 2 LayerNorms, attention and its 2 Linears, MLP and its 2 Linears), the
    final LayerNorm and the head."""
    for name in CASES:
        t = _analysis(name).table(RANKS_TABLE)
        assert (t["hooked_forwards_per_step"] == 1 + 2 + 8 * 9 + 1 + 1).all()


def test_the_section_reads_the_calls_and_the_hook_wait():
    section = zero3_section(_analysis(CASES[0]))
    rows = section.table.set_index("rank")
    assert rows.loc[0, "all-gathers forward"] == "3 (110 M el)"
    assert rows.loc[0, "after backward"] == "34 (34.8 k el)"
    assert rows.loc[0, "hook wait"].endswith("ms/step")
    assert not any("no GPU events" in n for n in section.notes)


def test_a_run_without_deepspeed_has_no_zero3_table():
    a = analyze(load_run(PARALLEL / "fsdp_block", cache=False))  # FSDP2: no DeepSpeed hooks
    assert a.table(RANKS_TABLE).empty and zero3_section(a) is None


@pytest.mark.parametrize("dims, elements", [
    ("[[3145728], [1572864], [], [], []]", 3145728),  # all_gather_into_tensor: the output
    ("[[1714432], [3428864], [], [], [], []]", 3428864),  # reduce_scatter_tensor: the input
    ("[[[4, 256], [1024]], [[2, 256], [512]], []]", 4 * 256 + 1024),  # coalesced: lists
    ("", 0), ("not json", 0), ("[[], []]", 0),
])
def test_call_elements(dims, elements):
    assert call_elements(dims) == elements


def test_the_group_of_zero3_and_its_scalar_all_reduce_is_sharded_data_parallel_only():
    """The raw trace's collectives (record_param_comms): all-gathers and reduce-scatters in
    the one group, and beside them only all-reduces of one float64 (8 B: DeepSpeed's
    overflow check), not gradients: the layout reads fsdp 2, not dp 2 and fsdp 2."""
    for rank in (0, 1):
        comms = [e["args"] for e in _raw_events(CASES[0], rank)
                 if e["name"] == "record_param_comms" and e["args"]["Collective name"] != "wait"]
        assert {c["Process Group Name"] for c in comms} == {"0"}
        kinds = {c["Collective name"] for c in comms}
        assert kinds == {"_allgather_base", "_reduce_scatter_base", "allreduce"}
        reduces = [c for c in comms if c["Collective name"] == "allreduce"]
        assert reduces and all(c["In msg nelems"] == 1 and c["dtype"] == "Double"
                               for c in reduces)
    a = _analysis(CASES[0])
    assert a.table("parallel_layout")["layout"].tolist() == ["2 ranks: fsdp 2"]
    dims = a.table("comm_dimensions")
    assert set(dims["dimension"]) == {D.SHARDED}


@pytest.mark.parametrize("max_bytes, want", [(8, D.SHARDED), (64, D.SHARDED),
                                             (4 << 20, D.DATA), (0, D.DATA)])
def test_an_all_reduce_beside_gathers_and_scatters_is_sharded_only_when_scalar(max_bytes, want):
    reduce = {"calls": 2, "forward_calls": 0, "no_backward_calls": 0, "max_bytes": max_bytes}
    out = D.pattern_dimensions({"all_gather", "reduce_scatter", "all_reduce"}, 2, 2,
                               reduce=reduce)
    assert out["all_reduce"][0] == want
    assert out["all_gather"][0] == out["reduce_scatter"][0] == D.SHARDED


def _host_findings(a, rank: int) -> list:
    return [f for f in a.findings if f.rank == rank and f.category in ("cpu_launch", "host_work")]


def test_zero3_host_findings_name_the_hooks_and_give_deepspeed_advice():
    """One host finding per rank (launch overhead and host work are one cause here), naming
    ZeRO-3's hooks, with DeepSpeed's advice and no CUDA graphs / torch.compile advice."""
    a = _analysis(CASES[0])
    for rank in (0, 1):
        (f,) = _host_findings(a, rank)
        assert "ZeRO-3" in f.message and "PreBackwardFunctionForModule" in f.message
        assert f.recommendation == ADVICE
        assert "reduce-overhead" not in f.recommendation
        assert set(f.evidence["folded"]) == {"cpu_launch", "host_work"} - {f.category}
    assert not any("torch.cuda.graphs" in f.recommendation for f in a.findings)


def test_the_hook_wait_is_bounded_by_deepspeeds_own_ranges_in_the_raw_trace():
    """The GPU cannot wait inside ZeRO-3's code longer than that code ran: the hook wait per
    step is at most the host time of DeepSpeed's autograd Functions (forward and backward
    nodes) and c10d fetches in the raw JSON's profiled steps, and at least 5% of the step
    (the threshold of the finding)."""
    t = _analysis(CASES[0]).table(RANKS_TABLE).set_index("rank")
    names = ("PreBackwardFunctionForModule", "PostBackwardFunctionModule",
             "LinearFunctionForZeroStage3", "c10d::_allgather_base_",
             "c10d::_reduce_scatter_base_")
    for rank in (0, 1):
        events = _raw_events(CASES[0], rank)
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                      if e.get("cat") == "cpu_op" and any(n in e["name"] for n in names))
        covered, end = 0.0, -1.0  # their union, us
        for lo, hi in mine:
            covered += max(0.0, hi - max(lo, end))
            end = max(end, hi)
        steps = sum(1 for e in events if e["name"].startswith("ProfilerStep#")
                    and e.get("cat") == "user_annotation")
        hook_ms = t.loc[rank, "hook_idle_ms_per_step"]
        assert 0.05 * t.loc[rank, "step_ms"] <= hook_ms <= covered / steps / 1e3


def test_the_saving_and_the_advice_agree_with_the_measured_twins():
    """The twins' own step times (SUMMARY.txt; only zero3_default is shipped): raising
    stage3_param_persistence_threshold to 1e7 is the measured fix; each rank's saving is
    within 0.15 of it, and the numbers the advice quotes are the labels'."""
    base, persist = _after_profiler_ms("zero3_default"), _after_profiler_ms("zero3_persist")
    reduce1m, noprefetch = (_after_profiler_ms(n) for n in ("zero3_reduce1m", "zero3_noprefetch"))
    assert _labels("zero3_persist")["zero_config"]["stage3_param_persistence_threshold"] == 1e7
    assert _labels("zero3_persist")["persistent_params"] == _labels("zero3_persist")["params"]
    assert _labels("zero3_reduce1m")["zero_config"]["reduce_bucket_size"] == 1e6
    assert _labels("zero3_noprefetch")["zero_config"]["stage3_prefetch_bucket_size"] == 0
    fix = 1 - persist / base
    a = _analysis(CASES[0])
    for rank in (0, 1):
        (f,) = _host_findings(a, rank)
        assert f.estimated_saving["fraction"] == pytest.approx(fix, abs=0.15)
    assert f"cut the step {fix:.0%} ({base:.0f} -> {persist:.0f} ms)" in ADVICE
    assert f"cost {reduce1m / base - 1:.0%} there ({reduce1m:.0f} ms" in ADVICE
    assert f"0 instead of 5e7: {noprefetch:.0f} ms" in ADVICE
    spread = _labels("zero3_default")["step_ms_per_rank"][0][5:10]
    assert min(spread) <= noprefetch <= max(spread)  # no effect beyond the steps' spread


def test_the_straggler_is_the_rank_whose_host_issues_the_post_step_gathers_later():
    """The straggler finding (rank 0, in the 2 kB all-gathers) is real: in the raw JSON, with
    run.json's clock offsets, rank 0 issues every re-gather of a persistent parameter after
    the optimizer step (512 elements a rank) later than rank 1 does."""
    offsets = json.loads((PARALLEL / CASES[0] / "run.json").read_text())["clock_offsets_ns"]
    issued = {}
    for rank in (0, 1):
        issued[rank] = sorted(e["ts"] + offsets[str(rank)] / 1e3 for e in _raw_events(
            CASES[0], rank) if e["name"] == "record_param_comms"
            and e["args"]["Collective name"] == "_allgather_base"
            and e["args"]["In msg nelems"] == 512)
    assert len(issued[0]) == len(issued[1]) == 68
    assert all(t0 > t1 for t0, t1 in zip(issued[0], issued[1]))
    (s,) = [f for f in _analysis(CASES[0]).findings if f.category == "straggler"]
    assert s.rank == 0 and "all_gather of 2.05 kB" in s.message


def _row(hook_ms: float, forward_gathers: float) -> dict:
    return {"rank": 0, "step_ms": 100.0, "hook_idle_ms_per_step": hook_ms,
            "host_idle_ms_per_step": 80.0, "hooked_forwards_per_step": 77.0,
            "all_gathers_forward": forward_gathers, "all_gathers_backward": 0.0,
            "all_gathers_after_backward": 34.0}


def _host(category: str, ms: float) -> Finding:
    return Finding(category=category, severity="warning", rank=0, message=category,
                   recommendation="CUDA graphs", evidence={"fraction": ms / 100}
                   ).with_saving(ms, ms / 100)


@pytest.mark.parametrize("hook_ms, forward_gathers, advice, saving", [
    (20.0, 3.0, ADVICE, 20.0),  # fetches: DeepSpeed's advice, the hook wait as saving
    (20.0, 0.0, ADVICE_NO_FETCH, None),  # everything persistent: no persistence advice
    (4.0, 3.0, "CUDA graphs", None),  # hook wait under 5% of the step: left alone
])
def test_zero3_host_folds_the_host_findings_by_the_hook_wait(hook_ms, forward_gathers, advice,
                                                             saving):
    findings = [_host("cpu_launch", 50.0), _host("host_work", 30.0),
                _host("straggler", 10.0)]
    out = zero3_host(findings, pd.DataFrame([_row(hook_ms, forward_gathers)]))
    if advice == "CUDA graphs":
        assert out == findings
        return
    assert [f.category for f in out] == ["cpu_launch", "straggler"]
    assert out[0].recommendation == advice and out[0].evidence["folded"] == {
        "host_work": "host_work"}
    got = (out[0].estimated_saving or {}).get("ms_per_step")
    assert got == saving
