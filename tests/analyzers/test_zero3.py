"""DeepSpeed ZeRO-3 recognition (measure/zero3.py, report/zero3_section.py) on the real
DeepSpeed 0.19.8 captures of samples/runs/parallel/zero3_cpu_* (2 CPU ranks, gloo), checked
against the workload's own labels (SUMMARY.txt: its parameters, and those under
stage3_param_persistence_threshold) and against the c10d operators counted in the raw
trace JSON here."""

from __future__ import annotations

import gzip
import json
import math
from functools import cache

import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.zero3 import CALLS_TABLE, RANKS_TABLE, call_elements
from profkit.analyzers.report.zero3_section import zero3_section

from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.realruns import sample_labels

PARALLEL = REPO / "samples" / "runs" / "parallel"
CASES = ("zero3_cpu_default", "zero3_cpu_noprefetch")


@cache
def _analysis(name: str):
    return analyze(load_run(PARALLEL / name, cache=False))


def _labels(name: str) -> dict:
    return sample_labels(PARALLEL / "SUMMARY.txt")[name]


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
    """Forward: the sharded parameters gathered (all of them, once); after the optimizer
    step: the persistent ones, one call each; one reduce-scatter of every gradient (the
    whole model is under reduce_bucket_size 5e8)."""
    lab = _labels(name)
    assert lab["zero_config"]["reduce_bucket_size"] == 500_000_000
    sharded = lab["param_numel"] - lab["persistent_numel"]
    t = _analysis(name).table(RANKS_TABLE).set_index("rank")
    assert sorted(t.index) == [0, 1]
    for rank in (0, 1):
        r = t.loc[rank]
        assert r["all_gather_elements_forward"] == sharded == 3_145_728
        assert r["all_gathers_after_backward"] == lab["persistent_params"] == 23
        assert r["all_gather_elements_after_backward"] == lab["persistent_numel"]
        assert r["all_gathers_backward"] == 0  # nothing released: max_live 1e9 holds them
        assert r["reduce_scatters"] == 1
        assert r["reduce_scatter_elements"] == lab["param_numel"]
        assert math.isnan(r["exposed_comm_ms_per_step"])  # no GPU events: no time


def test_prefetch_bucket_decides_the_forward_fetches():
    """DeepSpeed's default bucket (5e7 elements) holds the whole sharded model: one
    coalesced all-gather in the forward; a bucket of 0 fetches each module's sharded weight
    on its own: 13 calls (36 parameters, 23 persistent), the largest 262,144 elements
    (256 x 1024)."""
    default, none = (_analysis(n).table(RANKS_TABLE).set_index("rank") for n in CASES)
    assert _labels(CASES[0])["zero_config"]["stage3_prefetch_bucket_size"] == 50_000_000
    assert _labels(CASES[1])["zero_config"]["stage3_prefetch_bucket_size"] == 0
    lab = _labels(CASES[1])
    assert (default["all_gathers_forward"] == 1).all()
    assert (none["all_gathers_forward"] == lab["params"] - lab["persistent_params"]).all()
    assert (none["all_gather_max_elements"] == 256 * 1024).all()


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
    """41 modules in the sample GPT of 4 blocks: the GPT, 2 embeddings, 4 x 9 in each block
    (the block, 2 LayerNorms, attention and its 2 Linears, MLP and its 2 Linears), the
    final LayerNorm and the head."""
    for name in CASES:
        t = _analysis(name).table(RANKS_TABLE)
        assert (t["hooked_forwards_per_step"] == 1 + 2 + 4 * 9 + 1 + 1).all()


def test_the_section_reads_the_calls_and_says_no_saving():
    section = zero3_section(_analysis(CASES[0]))
    rows = section.table.set_index("rank")
    assert rows.loc[0, "all-gathers forward"] == "1 (3.15 M el)"
    assert rows.loc[0, "after backward"] == "23 (283 k el)"
    assert any("no GPU events" in n for n in section.notes)
    assert any("no finding or saving" in n for n in section.notes)
    assert not [f for f in _analysis(CASES[0]).findings if "zero" in f.category.lower()]


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
