"""Expert load imbalance (measure/experts.py, findings/experts.py) and FSDP wrapping
(measure/fsdp_units.py, findings/sharding.py) on the H200 captures of
samples/runs/parallel, labelled by the workload's own numbers (SUMMARY.txt): the tokens each
expert rank receives, the FSDP units it built, and each case's measured fix."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache

import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.experts import CATEGORY as EXPERTS
from profkit.analyzers.findings.experts import expert_findings, fold_straggler
from profkit.analyzers.findings.sharding import CATEGORY as WRAPPING
from profkit.analyzers.findings.sharding import fold_units
from profkit.analyzers.measure.experts import expert_balance, tokens_per_rank
from profkit.analyzers.measure.fsdp_units import block_of
from profkit.analyzers.result import Finding, Result

from profkit.run.loader import load_run
from tests.conftest import REPO
from tests.realruns import sample_labels

PARALLEL = REPO / "samples" / "runs" / "parallel"


def _labels() -> dict[str, dict]:
    return sample_labels(PARALLEL / "SUMMARY.txt")


def _steady_ms(name: str) -> float:
    """Median of every rank's step times after the profiler stopped (steps 5-7)."""
    per_rank = _labels()[name]["step_ms_per_rank"]
    return float(pd.Series([t for r in per_rank for t in r[5:]]).median())


@cache
def _analysis(name: str):
    return analyze(load_run(PARALLEL / name, cache=False))


def _raw(name: str, rank: int) -> list[dict]:
    path = PARALLEL / name / "traces" / f"rank{rank}.pt.trace.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _of(name: str, category: str) -> list[Finding]:
    return [f for f in _analysis(name).findings if f.category == category]


# --- expert parallelism -------------------------------------------------------------------

def test_tokens_received_match_the_labels_and_the_raw_split_sizes():
    table = _analysis("experts_skew").table("expert_tokens").set_index("rank")
    labelled = _labels()["experts_skew"]["tokens_received_per_rank"]
    assert [int(table.loc[r, "recv_tokens"]) for r in (0, 1)] == labelled == [98304, 32768]
    for rank in (0, 1):  # recomputed from the trace: the first all_to_allv carrying tokens
        calls = sorted((e["ts"], json.loads(e["args"]["Out split size"]))  # (the dispatch)
                       for e in _raw("experts_skew", rank)
                       if e.get("name") == "record_param_comms"
                       and e["args"].get("Collective name") == "all_to_allv"
                       and e["args"]["Out msg nelems"] > 2048)
        assert table.loc[rank, "recv_bytes"] == sum(calls[0][1]) * 2048 * 2 == labelled[rank] * 4096
    balanced = _analysis("experts_balanced").table("expert_tokens")
    assert balanced["recv_tokens"].tolist() == [65536, 65536]


def test_skewed_experts_name_load_imbalance_with_the_balanced_steps_saving():
    found = _of("experts_skew", EXPERTS)
    assert len(found) == 1 and found[0].rank == 0
    f = found[0]
    assert "load-balancing" in f.recommendation and "capacity factor" in f.recommendation
    assert not [g for g in _analysis("experts_skew").findings if g.category == "straggler"]
    measured = 1 - _steady_ms("experts_balanced") / _steady_ms("experts_skew")
    assert measured == pytest.approx(0.32, abs=0.02)
    assert abs(f.estimated_saving["fraction"] - measured) <= 0.15
    assert "uneven batch" not in f.recommendation


def test_balanced_experts_name_no_imbalance():
    assert _of("experts_balanced", EXPERTS) == []


def test_dispatch_is_the_all_to_all_whose_received_counts_differ():
    def calls(recv):  # two steps, dispatch then combine
        return pd.DataFrame({"step": [1, 1, 2, 2], "order": [0, 1, 0, 1],
                             "recv_elems": recv, "recv_bytes": [2.0 * v for v in recv],
                             "recv_tokens": [v / 4 for v in recv]})
    table = tokens_per_rank({0: calls([300, 200, 300, 200]), 1: calls([100, 200, 100, 200])})
    assert table.set_index("rank")["recv_tokens"].to_dict() == {0: 75, 1: 25}
    assert table["dispatch_order"].iloc[0] == 0
    assert table["imbalance"].iloc[0] == pytest.approx(1.5)
    assert tokens_per_rank({0: calls([1, 1, 1, 1]), 1: None}).empty  # one rank: no dispatch


def test_the_straggler_folds_into_the_imbalance_of_its_own_rank_only():
    late = [Finding("straggler", "critical", "Rank 0 is a straggler", "look", rank=0),
            Finding("straggler", "critical", "Rank 2 is a straggler", "look", rank=2)]
    imbalance = Finding(EXPERTS, "critical", "Expert load imbalance", "balance", rank=0)
    out = fold_straggler([*late, imbalance])
    assert [(f.category, f.rank) for f in out] == [("straggler", 2), (EXPERTS, 0)]
    assert "Rank 0 is a straggler" in out[1].message and "straggler" in out[1].evidence


# --- FSDP -----------------------------------------------------------------------------------

def _raw_units(name: str, rank: int) -> int:
    names = {e["name"] for e in _raw(name, rank) if e.get("cat") == "user_annotation"
             and re.match(r"FSDP::pre_forward( \(|$)", e.get("name", ""))}
    return len(names)


@pytest.mark.parametrize("name", ["fsdp_linear", "fsdp_block"])
def test_units_per_rank_match_the_labels(name):
    ranks = _analysis(name).table("fsdp_ranks").set_index("rank")
    label = _labels()[name]["fsdp_units"]
    for rank in (0, 1):
        assert ranks.loc[rank, "units"] == label == _raw_units(name, rank)
        assert ranks.loc[rank, "target_units"] == 9  # 8 blocks and the root


def test_per_linear_units_get_the_wrapping_advice_with_the_twins_saving():
    found = _of("fsdp_linear", WRAPPING)
    assert len(found) == 1
    f = found[0]
    assert "one unit per transformer block" in f.recommendation and "33 -> 9" in f.recommendation
    assert "CUDA graphs" not in f.recommendation
    measured = 1 - _steady_ms("fsdp_block") / _steady_ms("fsdp_linear")
    assert measured == pytest.approx(0.72, abs=0.03)
    assert abs(f.estimated_saving["fraction"] - measured) <= 0.15
    ranks = _analysis("fsdp_linear").table("fsdp_ranks").set_index("rank")
    assert f.rank == 0  # rank 1's exposed collectives are its wait for rank 0, not its own
    assert ranks.loc[1, "peer_wait_ms_per_step"] >= 0.9 * ranks.loc[1, "exposed_comm_ms_per_step"]
    assert ranks.loc[1, "saving_ms_per_step"] < 0.1 * ranks.loc[1, "step_ms"]
    rank_findings = {g.category for g in _analysis("fsdp_linear").findings if g.rank == f.rank}
    assert not rank_findings & {"cpu_launch", "host_work"}  # folded in: one cause, one finding


@pytest.mark.parametrize("name", ["parallel/fsdp_block", "profkit_fsdp"])
def test_per_block_units_get_no_wrapping_advice(name):
    a = analyze(load_run(REPO / "samples" / "runs" / name, cache=False))
    assert not [f for f in a.findings if f.category == WRAPPING]
    assert (a.table("fsdp_ranks")["units"] == a.table("fsdp_ranks")["target_units"]).all()


def test_a_unit_belongs_to_its_numbered_block():
    assert block_of("blocks.3.attn.qkv") == "blocks.3"
    assert block_of("model.layers.12.mlp.down_proj") == "model.layers.12"
    assert block_of("blocks.3") == "blocks.3"
    assert block_of("lm_head") == "lm_head"


def test_host_findings_fold_into_the_wrapping_finding_when_fsdp_holds_the_host():
    def host(share: float) -> list[Finding]:
        return [Finding(WRAPPING, "critical", "FSDP wraps", "wrap", rank=0,
                        evidence={"fsdp_host_share": share}),
                Finding("cpu_launch", "critical", "launch", "graphs", rank=0),
                Finding("straggler", "critical", "late", "look", rank=0,
                        evidence={"host_excess_ms_per_step": 5.0}),
                Finding("host_work", "warning", "host", "move", rank=1)]
    folded = fold_units(host(0.75))
    assert [(f.category, f.rank) for f in folded] == [(WRAPPING, 0), ("host_work", 1)]
    assert set(folded[0].evidence["folded"]) == {"cpu_launch", "straggler"}
    assert len(fold_units(host(0.3))) == 4  # FSDP is not what the host spends its time on


def _late(compute_ms: list[float], straggler: int) -> Result:
    n = len(compute_ms)
    return Result(tables={"stragglers": pd.DataFrame({
        "rank": range(n), "straggler": [r == straggler for r in range(n)],
        "compute_ns_per_step": [c * 1e6 for c in compute_ms],
        "others_exposed_wait_ns_per_step": [8e6 if r == straggler else 0.0 for r in range(n)],
        "others_step_ns": [40e6] * n})})


def _dispatch(tokens: list[int]) -> dict[int, pd.DataFrame]:
    return {r: pd.DataFrame({"step": [1], "order": [0], "recv_elems": [t * 8.0],
                             "recv_bytes": [t * 16.0], "recv_tokens": [float(t)]})
            for r, t in enumerate(tokens)}


def test_balanced_step_saving_over_four_ranks_by_hand():
    # compute = 2 ms + 1 us per token: rank 0 (10,000 tokens) 12 ms; the mean 5,500 tokens
    # would take 7.5 ms, so the balanced step saves 4.5 ms (under the others' 8 ms wait)
    facts = expert_balance(_dispatch([10000, 4000, 4000, 4000]),
                           _late([12.0, 6.0, 6.0, 6.0], straggler=0)).facts
    assert facts["straggler"] == 0
    assert facts["saving_ns_per_step"] == pytest.approx(4.5e6)
    assert facts["balanced_compute_ns_per_step"] == pytest.approx(7.5e6)


@pytest.mark.parametrize("tokens, compute, straggler", [
    ([4000, 10000, 4000, 4000], [12.0, 6.0, 6.0, 6.0], 0),  # the straggler is not the loaded rank
    ([10000, 9000, 1000, 2000], [12.0, 2.0, 11.0, 6.0], 0),  # compute does not follow tokens
    ([5000, 5000, 5000, 5200], [12.0, 6.0, 6.0, 6.0], 0),  # routing balanced within 10%
])
def test_no_imbalance_where_the_straggler_is_not_explained_by_tokens(tokens, compute, straggler):
    facts = expert_balance(_dispatch(tokens), _late(compute, straggler)).facts
    assert "straggler" not in facts
    assert expert_findings(expert_balance(_dispatch(tokens), _late(compute, straggler))) == []


def test_the_diff_names_the_change_of_fsdp_units():
    """fsdp_linear -> fsdp_block: the units each workload built (its fsdp_units label:
    every Linear, or every block, plus the root) as one change of the diff; a run against
    itself names none."""
    from profkit.analyzers.compare.pipelines import fsdp_changes

    base, new = (_labels()[f"fsdp_{u}"]["fsdp_units"] for u in ("linear", "block"))
    assert (base, new) == (33, 9)
    a, b = _analysis("fsdp_linear"), _analysis("fsdp_block")
    assert fsdp_changes(a, b) == [f"FSDP units {base} -> {new} per rank"]
    assert fsdp_changes(b, b) == []


@pytest.mark.parametrize("name", ["fsdp_linear", "fsdp_block"])
def test_the_forwards_all_gather_sizes_alone_give_the_blocks_the_names_give(name):
    """FSDP1 names no module: its blocks are read from the forward's all-gather sizes
    (repeating_units). On the FSDP2 captures, whose unit names say the answer (the raw
    trace's FSDP::pre_forward ranges), the sizes alone find the same blocks: 4 Linears per
    GPT block x 8 blocks, or 1 unit per block."""
    from profkit.analyzers.measure.fsdp_units import repeating_units

    for rank in (0, 1):
        events = _raw(name, rank)
        pre = sorted((e["ts"], e["name"]) for e in events if e.get("ph") == "X"
                     and e["name"].startswith("FSDP::pre_forward ("))
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                       if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"))
        lo, hi = steps[0]
        named = [n[len("FSDP::pre_forward ("):-1] for ts, n in pre if lo <= ts < hi]
        per_block = len(named) // len({block_of(u) for u in named})  # the names' answer
        gathers = sorted((e["ts"], e["args"].get("In msg nelems"))
                         for e in events if e.get("ph") == "X"
                         and e.get("name") == "record_param_comms"
                         and "allgather" in e["args"].get("Collective name", "")
                         and lo <= e["ts"] < hi)
        sizes = [n for _, n in gathers][:len(named) + 1]  # the root's first, then the units'
        assert repeating_units(sizes) == (per_block, 8)
        assert per_block == (4 if name == "fsdp_linear" else 1)


def test_a_repeating_pattern_needs_to_cover_half_the_units():
    from profkit.analyzers.measure.fsdp_units import repeating_units

    assert repeating_units([9, 3, 1, 4, 4, 3, 1, 4, 4]) == (4, 2)
    assert repeating_units([1, 2, 3, 4, 5, 6, 7, 7]) == (0, 0)  # one repeat of 8: no blocks
    assert repeating_units([5, 5, 5]) == (1, 3)


def test_fsdp1_per_linear_gets_the_block_target_from_its_sizes_and_the_twins_saving():
    """FSDP1 names no module; its 33 units (label: fsdp_units, counted again from the raw
    trace's FullyShardedDataParallel._pre_forward ranges) are read as 4 per block x 8 blocks
    + the root from the all-gather sizes, and the wrapping finding's saving is within 0.15 of
    the per-block twin's measured one (fsdp1_block, captured back to back: labels only)."""
    label = _labels()["fsdp1_linear"]
    for rank in (0, 1):
        events = _raw("fsdp1_linear", rank)
        host = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
        lo, hi = min((e["ts"], e["ts"] + e["dur"]) for e in host
                     if e["name"].startswith("ProfilerStep#"))
        pre = [e for e in host if lo <= e["ts"] < hi
               and e["name"] == "FullyShardedDataParallel._pre_forward"]
        assert len(pre) == label["fsdp_units"] == 33
    ranks = _analysis("fsdp1_linear").table("fsdp_ranks").set_index("rank")
    assert (ranks["version"] == "FSDP1").all() and (ranks["target_units"] == 9).all()
    assert (ranks["units_per_block"] == 4).all()
    found = _of("fsdp1_linear", WRAPPING)
    assert len(found) == 1 and "33 -> 9" in found[0].recommendation
    per_rank = _labels()["fsdp1_block"]["step_ms_per_rank"]
    block = float(pd.Series([t for r in per_rank for t in r[5:]]).median())
    measured = 1 - block / _steady_ms("fsdp1_linear")
    assert measured == pytest.approx(0.59, abs=0.03)
    assert abs(found[0].estimated_saving["fraction"] - measured) <= 0.15
    rank_findings = {g.category for g in _analysis("fsdp1_linear").findings
                     if g.rank == found[0].rank}
    assert not rank_findings & {"cpu_launch", "host_work", "straggler"}  # one cause
