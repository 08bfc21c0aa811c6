"""Tensor-parallel collectives (measure/tensor_parallel.py, findings/tensor_parallel.py) on
the H200 captures samples/runs/parallel/tp_mlp (DTensor Colwise/Rowwise MLP over 2 ranks)
and mesh2x2 (dp 2 x tp 2), counted again from the raw trace JSON."""

from __future__ import annotations

import gzip
import json
from functools import cache

import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.tensor_parallel import (
    ADVICE,
    ASYNC_ADVICE,
    ASYNC_ON,
    CATEGORY,
    tp_communication,
    tp_findings,
)
from profkit.analyzers.measure.tensor_parallel import TP_TABLE
from profkit.analyzers.result import Finding, Result

from profkit.run.loader import load_run
from tests.conftest import REPO

PARALLEL = REPO / "samples" / "runs" / "parallel"


@cache
def _analysis(name: str):
    return analyze(load_run(PARALLEL / name, cache=False))


def _raw_all_reduces(name: str, rank: int, group: str | None) -> tuple[float, list[int]]:
    """(all-reduces per profiled step, their bytes) from record_param_comms, in ``group``
    (its description) or any."""
    events = json.loads(gzip.decompress(
        (PARALLEL / name / "traces" / f"rank{rank}.pt.trace.json.gz").read_bytes()))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep")]
    hits = [e for e in events if e.get("name") == "record_param_comms"
            and e["args"].get("Collective name") == "allreduce"
            and (group is None or e["args"].get("Process Group Description") == group)
            and any(a <= e["ts"] < b for a, b in steps)]
    return len(hits) / len(steps), [e["args"]["Out msg nelems"] * 2 for e in hits]  # bf16


def test_tp_mlp_all_reduces_are_tensor_parallel():
    table = _analysis("tp_mlp").table(TP_TABLE).set_index("rank")
    per_step, sizes = _raw_all_reduces("tp_mlp", 0, None)
    assert per_step == 7 and set(sizes) == {131072}
    assert table.loc[0, "collectives_per_step"] == per_step
    assert table.loc[0, "median_mib"] * 2**20 == 131072


def test_mesh_counts_the_tp_group_only():
    table = _analysis("mesh2x2").table(TP_TABLE).set_index("rank")
    tp, _ = _raw_all_reduces("mesh2x2", 0, "mesh_tp")
    every, _ = _raw_all_reduces("mesh2x2", 0, None)
    assert tp == 7 and every > tp  # the dp gradient all-reduces are not TP
    assert (table["collectives_per_step"] == tp).all()


def test_a_late_peers_wait_is_not_tp_transfer():
    """tp_mlp: rank 0's host is late, so rank 1's TP all-reduces wait for it: no TP finding,
    and the communication finding on rank 1 says to fix the late rank first."""
    a = _analysis("tp_mlp")
    row = a.table(TP_TABLE).set_index("rank").loc[1]
    assert row["waiting_ms_per_step"] >= 0.9 * row["exposed_ms_per_step"] > 1.0
    assert row["transfer_share"] < 0.05
    assert not [f for f in a.findings if f.category == CATEGORY]
    comm = [f for f in a.findings if f.category == "communication" and f.rank == 1]
    assert comm and "late peer" in comm[0].recommendation
    assert "bucket_cap_mb" not in comm[0].recommendation
    assert [f.rank for f in a.findings if f.category == "straggler"] == [0]


def _table(share: float, waiting: float = 0.1, **more) -> pd.DataFrame:
    return pd.DataFrame([{"rank": 0, "collectives_per_step": 48.0, "median_mib": 4.0,
                          "exposed_ms_per_step": 20 * share + waiting,
                          "waiting_ms_per_step": waiting, "transfer_ms_per_step": 20 * share,
                          "step_ms": 20.0, "transfer_share": share, **more}])


@pytest.mark.parametrize("share, found", [(0.3, True), (0.05, False)])
def test_exposed_tp_transfer_is_a_finding_above_a_tenth_of_the_step(share, found):
    out = tp_findings(Result(tables={TP_TABLE: _table(share)}))
    assert bool(out) == found
    if found:
        assert out[0].estimated_saving is None  # the TP degree unknown: no estimate
        assert out[0].evidence["transfer_ms_per_step"] == 6.0
        assert "not in the trace" in out[0].message
        assert out[0].recommendation == ADVICE


@pytest.mark.parametrize("n, sp, saving_ms", [(2, False, 3.0), (4, False, 4.5), (2, True, 1.0)])
def test_async_tp_saves_n_minus_1_over_n_of_the_transfer_it_splits(n, sp, saving_ms):
    """All-reduce TP: (n-1)/n of its exposed transfer (6 ms); sequence parallel: of the
    all-gathers' and reduce-scatters' (2 ms of the 6), the optimizer's all-reduces stay."""
    out = tp_findings(Result(tables={TP_TABLE: _table(
        0.3, group_size=n, sequence_parallel=sp, async_tp=False,
        split_transfer_ms_per_step=2.0 if sp else 0.0)}))
    assert out[0].estimated_saving["ms_per_step"] == pytest.approx(saving_ms)
    assert out[0].recommendation == (ASYNC_ADVICE if sp else ADVICE)


def test_async_tp_already_on_gets_no_async_advice_and_no_saving():
    out = tp_findings(Result(tables={TP_TABLE: _table(
        0.3, group_size=2, sequence_parallel=True, async_tp=True,
        split_transfer_ms_per_step=5.0)}))
    assert out[0].estimated_saving is None and out[0].recommendation == ASYNC_ON


def test_communication_of_tp_collectives_gets_tp_advice_or_folds_into_the_tp_finding():
    comm = Finding("communication", "warning", "rank 0: 30% communication", "bucket_cap_mb",
                   rank=0, evidence={"ms_per_step": 6.0})
    other = Finding("communication", "warning", "rank 1: 30%", "bucket_cap_mb", rank=1,
                    evidence={"ms_per_step": 6.0})
    advised = tp_communication([comm, other], _table(0.3))
    assert advised[0].recommendation == ADVICE and advised[1] is other  # rank 1: no TP
    tp = tp_findings(Result(tables={TP_TABLE: _table(0.3)}))
    folded = tp_communication([*tp, comm], _table(0.3))
    assert [f.category for f in folded] == [CATEGORY]
    assert folded[0].evidence["communication"] == comm.message
    assert tp_communication([comm], _table(0.01, waiting=0.1))[0] is comm  # TP is not most of it


# --- compiled sequence parallel and async TP (samples/runs/parallel/tp_sp, tp_async) -------
def _steady_ms(name: str) -> float:
    """Median of rank 0's step times after the profiler stopped (steps 6-9), as printed by
    the workload itself (CUDA events), independent of profkit."""
    from tests.realruns import sample_labels

    return float(pd.Series(sample_labels(PARALLEL / "SUMMARY.txt")[name]
                           ["step_ms_per_rank"][0][6:]).median())


@pytest.mark.parametrize("name", ["tp_sp", "tp_async"])
def test_compiled_sequence_parallel_reads_as_tp_not_data_or_sharded(name):
    """A 1-D DeviceMesh over both ranks runs on the default group, whose name says nothing;
    the all-gathers and reduce-scatters are Inductor's, inside the compiled graphs (counted
    from the raw trace: every one under a CompiledFunction range), so they are TP's, not
    FSDP's: the layout is the workload's own ("tp 2"), and no advice speaks of DDP buckets
    or FSDP prefetching."""
    events = json.loads(gzip.decompress(
        (PARALLEL / name / "traces" / "rank0.pt.trace.json.gz").read_bytes()))["traceEvents"]
    compiled = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X"
                and e["name"] in ("CompiledFunction", "CompiledFunctionBackward")]
    split = [e["ts"] for e in events if e.get("name") == "record_param_comms"
             and e["args"].get("Collective name", "").endswith("_coalesced")]
    assert split and all(any(a <= t <= b for a, b in compiled) for t in split)
    a = _analysis(name)
    from tests.realruns import sample_labels
    assert sample_labels(PARALLEL / "SUMMARY.txt")[name]["layout"] == "tp 2"
    assert a.table("parallel_layout")["layout"].iloc[0] == "2 ranks: tp 2"
    assert not [f for f in a.findings if "bucket_cap_mb" in f.recommendation
                or "FSDP forward/backward prefetch" in f.recommendation]


def test_sequence_parallel_gets_async_tp_with_the_twins_saving():
    """tp_sp -> tp_async is the one change async TP makes (both compiled, same model and
    rows): its measured saving after the profiler (-5.3%) is within 0.15 of the estimate
    ((n-1)/n of the exposed all-gather and reduce-scatter transfer)."""
    found = [f for f in _analysis("tp_sp").findings if f.category == CATEGORY]
    assert sorted(f.rank for f in found) == [0, 1]  # one per rank (the report folds them)
    measured = 1 - _steady_ms("tp_async") / _steady_ms("tp_sp")
    assert measured == pytest.approx(0.053, abs=0.01)
    for f in found:
        assert f.recommendation == ASYNC_ADVICE
        assert abs(f.estimated_saving["fraction"] - measured) <= 0.15
        assert f.evidence["sequence_parallel"] and not f.evidence["async_tp"]


def test_async_tp_is_recognised_as_on():
    found = [f for f in _analysis("tp_async").findings if f.category == CATEGORY]
    assert found and all(f.recommendation == ASYNC_ON and f.estimated_saving is None
                         for f in found)
