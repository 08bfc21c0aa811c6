"""Pipeline parallelism (analyzers/measure/p2p.py, pipeline.py, findings/pipeline.py): the
waits of point-to-point kernels charged as the pipeline bubble, and the pipeline's stages,
microbatches, schedule and bubble read from real 4-stage GPipe captures (H200, labelled in
samples/runs/parallel/SUMMARY.txt by the workload's own CUDA-event step times)."""

import gzip
import json

import numpy as np
import pytest
from profkit.analyzers.measure.breakdown import rank_steps
from profkit.analyzers.measure.pipeline import bubble_theory, step_model_ns

from profkit.run.loader import load_run
from tests.analysed import analysed
from tests.conftest import REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x
from tests.realruns import sample_labels

PARALLEL = REPO / "samples" / "runs" / "parallel"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def p2p_timeline(op: str) -> list[dict]:
    """One step of 1000 us. ``op`` issues two SendRecv kernels: 10-310 us (launched at 9,
    inside ``op`` 5-8's wake: the last communication op before the launch) and 400-420 us
    (the shortest: the transfer itself). Compute runs 310-400 and 420-1000."""
    return [step(0, 0.0, 1000.0),
            x(op, "cpu_op", 5.0, 3.0), launch(9.0, 1.0, 1),
            kernel(SENDRECV, 10.0, 300.0, 1, stream=20),
            launch(11.0, 1.0, 2), kernel("sm90_xmma_gemm_bf16", 310.0, 90.0, 2),
            x(op, "cpu_op", 12.0, 2.0), launch(15.0, 1.0, 3),
            kernel(SENDRECV, 400.0, 20.0, 3, stream=20),
            launch(16.0, 1.0, 4), kernel("sm90_xmma_gemm_bf16", 420.0, 580.0, 4)]


@pytest.mark.parametrize("op, bubble_us, comm_us", [
    ("c10d::recv_", 280, 40),  # 10-290 waits (300 - the shortest 20); 290-310 and 400-420 move
    ("c10d::send", 280, 40),
    ("c10d::alltoall_base_", 0, 320),  # NCCL runs an all-to-all as SendRecv too: not a bubble
])
def test_point_to_point_waits_are_the_bubble(tmp_path, op, bubble_us, comm_us):
    path = write_trace(tmp_path / "rank0.json",
                       trace_doc(rank=0, world_size=2, events=p2p_timeline(op)))
    row = rank_steps(load_run(path, cache=False).ranks[0]).iloc[0]
    assert row["pipeline_bubble"] == bubble_us * 1000
    assert row["communication"] == comm_us * 1000
    assert row["compute"] == 670_000
    parts = [c for c in row.index if c in ("compute", "communication", "pipeline_bubble",
                                           "memcpy", "cpu_launch", "host_work", "data_loading",
                                           "host_sync", "idle_other")]
    assert row[parts].sum() == row["step_ns"] == 1_000_000  # one cause per instant


def test_the_stage_model_is_the_theory_for_balanced_stages():
    # p = 4 balanced stages of 100 ms own time each, m = 4: (m+p-1) x 25 ms
    assert step_model_ns(np.full(4, 100e6), 4) == pytest.approx(7 * 25e6)
    assert bubble_theory(4, 4) == pytest.approx(3 / 7)
    assert bubble_theory(4, 16) == pytest.approx(3 / 19)
    # 4 -> 16 microbatches at a fixed global batch: 1 - (19/16) / (7/4)
    saving = 1 - step_model_ns(np.full(4, 100e6), 16) / step_model_ns(np.full(4, 100e6), 4)
    assert saving == pytest.approx(1 - (19 / 16) / (7 / 4))
    # one stage 1.5x slower paces the others: (m-1) x 37.5 + (25 + 25 + 25 + 37.5) ms
    assert step_model_ns(np.array([100e6, 100e6, 100e6, 150e6]), 4) == pytest.approx(225e6)


def _labels(name: str) -> dict:
    """The workload's own labels (SUMMARY.txt's PROFKIT_SAMPLE line of ``name``)."""
    return sample_labels(PARALLEL / "SUMMARY.txt")[name]


def _raw_kernels(name: str, rank: int) -> list[dict]:
    path = PARALLEL / name / "traces" / f"rank{rank}.pt.trace.json.gz"
    with gzip.open(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]


def _busy_ms(kernels: list[dict]) -> float:
    """The union of the kernels' [ts, ts + dur), ms."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels)
    total, end = 0.0, -np.inf
    for s, e in spans:
        if e > end:
            total += e - max(s, end)
            end = e
    return total / 1e3


@pytest.fixture(scope="module")
def m4():
    return analysed(PARALLEL / "pipeline_m4")


@pytest.fixture(scope="module")
def m16():
    return analysed(PARALLEL / "pipeline_m16")


def test_a_gpipe_run_of_four_stages_and_four_microbatches(m4):
    label = _labels("pipeline_m4")
    stages = m4.table("pipeline_stages")
    assert len(stages) == label["stages"] == 4
    assert stages["rank"].tolist() == [0, 1, 2, 3]  # torchrun puts stage i on rank i
    assert (stages["microbatches"] == label["microbatches"]).all()
    found = next(f for f in m4.findings if f.category == "pipeline_bubble")
    assert found.evidence["schedule"] == label["schedule"] == "gpipe"
    # the pipeline's step: the first stage's GPU span of the profiled step 3 is the
    # workload's CUDA-event step 3 (259.6 ms)
    assert found.evidence["step_ms"] == pytest.approx(label["step_ms_per_rank"][0][3], rel=0.01)
    bubble = stages["bubble_frac"].to_numpy()
    assert np.abs(bubble - label["bubble_theory"]).max() < 0.1
    # independently: 1 - each rank's non-SendRecv kernel time per step (2 profiled steps,
    # nothing else idles these GPUs) / the step
    for rank, frac in zip(stages["rank"], bubble):
        kernels = [k for k in _raw_kernels("pipeline_m4", rank) if "SendRecv" not in k["name"]]
        own = _busy_ms(kernels) / 2
        assert frac == pytest.approx(1 - own / label["step_ms_per_rank"][0][3], abs=0.03)
    # the point-to-point waits are charged as the bubble, not as communication
    ranks = m4.table("rank_breakdown").set_index("rank")
    assert (ranks["pipeline_bubble"] > 0.25).all() and (ranks["communication"] < 0.02).all()


def test_more_microbatches_saving_is_the_measured_fix(m4):
    """4 -> 16 microbatches at the same global batch: the workload's median step after the
    profiler (steps 5-7) 258.2 -> 194.0 ms, -24.9%."""
    found = next(f for f in m4.findings if f.category == "pipeline_bubble")
    assert found.evidence["more_microbatches"] == 16
    before = np.median(_labels("pipeline_m4")["step_ms"][5:])
    after = np.median(_labels("pipeline_m16")["step_ms"][5:])
    measured = 1 - after / before
    assert measured == pytest.approx(0.249, abs=0.005)
    assert abs(found.evidence["more_microbatches_saving_frac"] - measured) < 0.15
    assert "4 -> 16" in found.recommendation and "1F1B" in found.recommendation
    assert "pipeline of 4 stages x 4 microbatches (GPipe)" in m4.verdict["summary"]
    assert "clock" not in found.message


def test_sixteen_microbatches_and_the_stage_that_paces_them(m16):
    """m16's one profiled step: stages 0-2 wait ~40% (theory 16%) because stage 3 takes
    ~1.5x their time per microbatch (its host launches for small microbatches); measured
    from the raw trace: each rank's SendRecv kernel time over the step."""
    label = _labels("pipeline_m16")
    stages = m16.table("pipeline_stages")
    assert len(stages) == 4 and (stages["microbatches"] == label["microbatches"]).all()
    step_ms = label["step_ms_per_rank"][0][3]
    for rank, frac in zip(stages["rank"], stages["bubble_frac"]):
        waits = sum(k["dur"] for k in _raw_kernels("pipeline_m16", rank)
                    if "SendRecv" in k["name"]) / 1e3
        assert frac == pytest.approx(waits / step_ms, abs=0.03)
    assert stages["unbalanced"].tolist() == [False, False, False, True]
    found = next(f for f in m16.findings if f.category == "pipeline_bubble")
    assert found.evidence["unbalanced_stages"] == ["stage 3 (rank 3)"]
    # the stage model explains the measured step (240.7 ms)
    assert found.evidence["model_step_ms"] == pytest.approx(step_ms, rel=0.03)
    assert "Rebalance the stages: stage 3 (rank 3)" in found.recommendation


@pytest.mark.parametrize("run", ["experts_skew", "fsdp_block", "tp_mlp"])
def test_no_pipeline_in_runs_that_are_not_one(run):
    a = analysed(PARALLEL / run)
    assert a.table("pipeline_stages").empty
    assert (a.table("rank_breakdown")["pipeline_bubble"] == 0).all()
    assert not any(f.category == "pipeline_bubble" for f in a.findings)


def test_a_1f1b_run_without_the_librarys_ranges():
    """1F1B, 4 stages x 4 microbatches (tests/data/pipeline_m4_1f1b, its LABEL.txt):
    Schedule1F1B writes no Forward/Backward ranges, so the schedule comes from the end
    stages' sends and receives; with m = p the first stage runs its four forwards first and
    only the last stage alternates. Its one profiled step is the label's step 3."""
    run = REPO / "tests" / "data" / "pipeline_m4_1f1b"
    text = (run / "LABEL.txt").read_text()
    label = json.loads(text.split(" PROFKIT_SAMPLE ", 1)[1])
    a = analysed(run)
    stages = a.table("pipeline_stages")
    assert len(stages) == label["stages"] == 4 and stages["rank"].tolist() == [0, 1, 2, 3]
    assert (stages["microbatches"] == label["microbatches"]).all()
    found = next(f for f in a.findings if f.category == "pipeline_bubble")
    assert found.evidence["schedule"] == label["schedule"] == "1f1b"
    assert "(1F1B)" in a.verdict["summary"]
    assert found.evidence["step_ms"] == pytest.approx(label["step_ms_per_rank"][0][3], rel=0.01)
    assert np.abs(stages["bubble_frac"] - label["bubble_theory"]).max() < 0.1
    for rank, frac in zip(stages["rank"], stages["bubble_frac"]):
        with gzip.open(run / "traces" / f"rank{rank}.pt.trace.json.gz", "rt") as f:
            kernels = [e for e in json.load(f)["traceEvents"]
                       if e.get("cat") == "kernel" and "SendRecv" not in e["name"]]
        own = _busy_ms(kernels)  # one step
        assert frac == pytest.approx(1 - own / label["step_ms_per_rank"][0][3], abs=0.03)


def test_the_bubble_column_is_shown_only_where_a_rank_has_one(m4):
    from profkit.analyzers.report.render import to_text

    zoo = to_text(analysed(REPO / "samples" / "runs" / "zoo" / "balanced"), width=200)
    assert "bubble" not in zoo  # neither the column nor its legend
    text = to_text(m4, width=200)
    header = next(line for line in text.splitlines() if line.lstrip().startswith("rank  step"))
    assert "pipeline bubble" in header
    assert "pipeline bubble: a stage waits for its neighbours" in text


@pytest.fixture(scope="module")
def m8():
    return {s: analysed(PARALLEL / f"pipeline_m8_{s}") for s in ("1f1b", "interleaved")}


def test_an_interleaved_schedule_is_read_with_its_stages_per_rank(m8):
    """ScheduleInterleaved1F1B, 2 stages per rank (rank r holds stages r and r+4): its
    point-to-point transfers close a ring, and the runtime's PP:<stage>F<mb> actions say the
    stages per rank and the microbatches."""
    label = _labels("pipeline_m8_interleaved")
    a = m8["interleaved"]
    found = next(f for f in a.findings if f.category == "pipeline_bubble")
    assert found.evidence["schedule"] == label["schedule"] == "interleaved"
    assert found.evidence["stages_per_rank"] == label["virtual_stages"] == 2
    assert found.evidence["microbatches"] == label["microbatches"] == 8
    assert found.evidence["theory_frac"] == pytest.approx(label["bubble_theory"], abs=1e-3)
    assert a.table("parallel_layout")["layout"].iat[0] == "4 ranks: pipeline of 4 stages"
    # interleaving measured slower here: the advice says so instead of recommending it
    assert "6% slower" in found.recommendation


def test_the_1f1b_twin_keeps_its_theory_and_measures_the_interleaved_caveat(m8):
    label, other = _labels("pipeline_m8_1f1b"), _labels("pipeline_m8_interleaved")
    found = next(f for f in m8["1f1b"].findings if f.category == "pipeline_bubble")
    assert found.evidence["schedule"] == "1f1b" and found.evidence["stages_per_rank"] == 1
    assert found.evidence["theory_frac"] == pytest.approx(label["bubble_theory"], abs=1e-3)
    # the caveat's numbers: the workloads' median steps after the profiler (steps 5-7)
    after = [np.median(lab["step_ms"][5:]) for lab in (label, other)]
    assert after[1] / after[0] - 1 == pytest.approx(0.06, abs=0.01)
    assert "ScheduleInterleaved1F1B" in found.recommendation and "6% slower" in found.recommendation
