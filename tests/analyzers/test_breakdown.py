"""The step breakdown on a hand-built timeline whose every part is known, and on the
labelled runs captured on purpose on 2x H200 (samples/runs/zoo)."""

import pytest
from profkit.analyzers.breakdown import PARTS, analyze_breakdown, rank_steps

from profkit import tracefile
from profkit.loader import load_run
from profkit.model import RankData
from tests.conftest import REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x


def timeline():
    """Two steps, times in us. Step 1 = [0, 1000), step 2 = [1000, 1200).

    step 1: gap 0-100 before kernel A (launched at 10, after the gap began)  -> cpu_launch 100
            A compute 100-400; B NCCL 300-600, exposed 400-600               -> compute 300, comm 200
            C HtoD copy 600-650, its call 30-35 did not wait                 -> memcpy 50
            gap 650-700 while the host is in the DataLoader (640-700)        -> data_loading 50
            D compute 700-750                                                -> compute 50
            E DtoH copy 750-800, its call 745-801 waited for it              -> host_sync 50
            gap 800-900 begins inside cudaStreamSynchronize 790-805          -> host_sync 100
            F compute 900-950; gap 950-1000, next op launched at 1002        -> compute 50, cpu_launch 50
            total 1000 = compute 400 + comm 200 + memcpy 50 + data 50 + sync 150 + launch 150
    step 2: gap 1000-1010, H launched at 1002                                -> cpu_launch 10
            H compute 1010-1050; I compute 1100-1200 launched at 1005, so the
            gap 1050-1100 had work queued                                    -> compute 140, idle_other 50
            total 200
    """
    return [
        step(1, 0.0, 1000.0), step(2, 1000.0, 200.0),
        launch(10.0, 2.0, 1), kernel("sm90_xmma_gemm_bf16", 100.0, 300.0, 1),
        launch(20.0, 2.0, 2), kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 300.0, 300.0, 2,
                                     stream=20),
        x("cudaMemcpyAsync", "cuda_runtime", 30.0, 5.0, correlation=3),
        x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 600.0, 50.0, pid=0, tid=7,
          correlation=3, stream=7, device=0),
        x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation",
          640.0, 60.0),
        launch(690.0, 2.0, 4), kernel("vectorized_elementwise_kernel", 700.0, 50.0, 4),
        x("cudaMemcpyAsync", "cuda_runtime", 745.0, 56.0, correlation=5),
        x("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", 750.0, 50.0, pid=0, tid=7,
          correlation=5, stream=7, device=0),
        x("cudaStreamSynchronize", "cuda_runtime", 790.0, 15.0),
        launch(890.0, 2.0, 6), kernel("vectorized_elementwise_kernel", 900.0, 50.0, 6),
        launch(1002.0, 2.0, 7), kernel("sm90_xmma_gemm_bf16", 1010.0, 40.0, 7),
        launch(1005.0, 2.0, 8), kernel("sm90_xmma_gemm_bf16", 1100.0, 100.0, 8),
    ]


@pytest.fixture
def data(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=timeline()))
    return load_run(path, cache=False).ranks[0]


def test_every_part_of_a_known_timeline(data: RankData):
    table = rank_steps(data).set_index("step")
    us = 1000
    assert table.loc[1, "step_ns"] == 1000 * us
    assert {p: table.loc[1, p] // us for p in PARTS} == {
        "compute": 400, "communication": 200, "memcpy": 50, "cpu_launch": 150,
        "data_loading": 50, "host_sync": 150, "idle_other": 0}
    assert {p: table.loc[2, p] // us for p in PARTS} == {
        "compute": 140, "communication": 0, "memcpy": 0, "cpu_launch": 10,
        "data_loading": 0, "host_sync": 0, "idle_other": 50}
    assert (table[list(PARTS)].sum(axis=1) == table["step_ns"]).all()


def test_rank_fractions_sum_to_one_and_name_the_largest_class(data):
    from profkit.model import Run

    run = Run("t", {"world_size": 1}, {0: data})
    ranks = analyze_breakdown(run).tables["rank_breakdown"]
    row = ranks.iloc[0]
    assert sum(row[p] for p in PARTS) == pytest.approx(1.0)
    assert row["compute"] == pytest.approx(540 / 1200)
    assert row["primary"] == "compute"


def test_trace_without_steps_uses_the_gpu_span(tmp_path):
    events = [e for e in timeline() if not e["name"].startswith("ProfilerStep")]
    path = write_trace(tmp_path / "t.json", trace_doc(rank=0, world_size=1, events=events))
    table = rank_steps(load_run(path, cache=False).ranks[0])
    assert list(table["step"]) == [-1]
    assert table["step_ns"].iloc[0] == (1200 - 100) * 1000  # first GPU start to last GPU end


def test_trace_without_gpu_events_gives_no_rows(tmp_path):
    events = [step(1, 0.0, 10.0), x("aten::add", "cpu_op", 1.0, 2.0)]
    path = write_trace(tmp_path / "t.json", trace_doc(rank=0, world_size=1, events=events))
    assert rank_steps(load_run(path, cache=False).ranks[0]).empty


ZOO = REPO / "samples" / "runs" / "zoo"


@pytest.mark.parametrize("label", ["compute", "communication", "cpu_launch", "data_loading",
                                   "host_sync"])
def test_each_labelled_zoo_run_gets_its_label(label):
    """Ground truth: each script provokes its bottleneck on purpose (samples/zoo/README.md)."""
    ranks = analyze_breakdown(load_run(ZOO / label, cache=False)).tables["rank_breakdown"]
    assert set(ranks["primary"]) == {label}
    assert (ranks[label] > 0.5).all()


def test_the_straggler_run_makes_the_fast_rank_wait_in_communication():
    ranks = analyze_breakdown(load_run(ZOO / "straggler", cache=False)).tables["rank_breakdown"]
    by_rank = ranks.set_index("rank")
    assert by_rank.loc[0, "communication"] > 3 * by_rank.loc[1, "communication"]


def test_a_tracefile_can_be_read_twice_for_the_same_answer(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=timeline()))
    first = rank_steps(load_run(path, cache=False).ranks[0])
    assert len(tracefile.load(path)) == len(timeline())
    assert first.equals(rank_steps(load_run(path).ranks[0]))


def test_overlap_copy_share_and_streams_of_the_known_timeline(data):
    table = rank_steps(data).set_index("step")
    # NCCL B 300-600 overlaps compute A (100-400) for 100 us; the waited copy E is 50 us.
    assert table.loc[1, "comm_overlap_ns"] == 100_000
    assert table.loc[1, "host_sync_copy_ns"] == 50_000
    from profkit.model import Run

    result = analyze_breakdown(Run("t", {"world_size": 1}, {0: data}))
    assert result.tables["rank_breakdown"]["comm_overlap_frac"].iloc[0] == pytest.approx(100 / 300)
    streams = result.tables["stream_breakdown"].set_index("stream")
    assert streams.loc[20, "communication_ns"] == 300_000 and streams.loc[20, "ops"] == 1
    assert streams.loc[7, "compute_ns"] == (300 + 50 + 50 + 40 + 100) * 1000


def test_compute_subclasses_of_the_known_timeline(data):
    from profkit.model import Run

    table = analyze_breakdown(Run("t", {"world_size": 1}, {0: data})).tables["compute_subclasses"]
    ns = table.set_index("subcls")["kernel_ns"]
    # gemm: A 300 + H 40 + I 100 us; elementwise: D 50 + F 50 us
    assert ns.to_dict() == {"gemm": 440_000, "elementwise": 100_000}
    assert table["share"].sum() == pytest.approx(1.0)
