"""The step breakdown on a hand-built timeline whose every part is known, and on the
labelled runs captured on purpose on 2x H200 (samples/runs/zoo)."""

import pytest
from profkit.analyzers.measure.breakdown import PARTS, analyze_breakdown, rank_steps

from profkit.model import RankData
from profkit.run.loader import load_run
from profkit.trace import tracefile
from tests.conftest import REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace, x


def timeline():
    """Two steps, times in us. Step 1 = [0, 1000), step 2 = [1000, 1200).

    Every idle instant is charged by what the launching thread (all on tid 100 here) was
    doing at that instant, up to the launch call of the op that ends the gap:

    step 1: gap 0-100 before kernel A (launch call 60-62): host 0-62, then the late
            launch's latency 62-100 (under 50 us)                            -> cpu_launch 100
            A compute 100-400; B NCCL 300-600, exposed 400-600               -> compute 300, comm 200
            C pinned HtoD copy 600-650, its call 30-35 did not block         -> memcpy 50
            gap 650-700 before D (launch call 690-692): host inside the
            DataLoader range 640-700 until 692, then launch latency 692-700  -> data_loading 42, cpu_launch 8
            D compute 700-750                                                -> compute 50
            E pageable DtoH copy 750-800: its own call 745-801 blocked       -> host_sync 50
            gap 800-900 before F (launch call 890-892): host blocked in the
            copy call / cudaStreamSynchronize 790-805 until 805, then host
            work 805-892 (after a sync: a round trip), latency 892-900      -> host_sync 5, cpu_launch 95
            (801-890 between launching ranges: 89 us, launch overhead)
            F compute 900-950; gap 950-1000 (H launched 1002-1004): the host
            launched nothing from 892 to 1002, 110 us >= 100 us: host work  -> compute 50, host_work 50
            total 1000 = compute 400 + comm 200 + memcpy 50 + data 42 + sync 55 + launch 203
                         + host work 50
    step 2: gap 1000-1010: host 1000-1002 still in that stretch (host work),
            launch call 1002-1004, latency 1004-1010                         -> host_work 2, cpu_launch 8
            H compute 1010-1050; I compute 1100-1200 launched at 1005-1007,
            before the gap 1050-1100 began: queued, held                     -> compute 140, idle_other 50
            total 200
    """
    return [
        step(1, 0.0, 1000.0), step(2, 1000.0, 200.0),
        launch(60.0, 2.0, 1), kernel("sm90_xmma_gemm_bf16", 100.0, 300.0, 1),
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
        "compute": 400, "communication": 200, "memcpy": 50, "cpu_launch": 203,
        "host_work": 50, "data_loading": 42, "host_sync": 55, "idle_other": 0,
        "pipeline_bubble": 0}
    assert table.loc[1, "after_sync_ns"] == 87 * us  # 805-892: host work after the sync
    assert {p: table.loc[2, p] // us for p in PARTS} == {
        "compute": 140, "communication": 0, "memcpy": 0, "cpu_launch": 8,
        "host_work": 2, "data_loading": 0, "host_sync": 0, "idle_other": 50,
        "pipeline_bubble": 0}
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


def test_a_launched_kernel_held_back_is_idle_other_not_launch_latency(tmp_path):
    """Kernel B is launched at 120-122 while the GPU runs A (100-150) but starts only at 400:
    50 us after the launch returned is latency at most; the rest of the gap is B held back
    (a stream waiting on an event)."""
    events = [step(1, 0.0, 500.0), launch(90.0, 2.0, 1), kernel("gemm_a", 100.0, 50.0, 1),
              launch(160.0, 2.0, 2), kernel("gemm_b", 400.0, 100.0, 2)]
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=events))
    row = rank_steps(load_run(path, cache=False).ranks[0]).iloc[0]
    us = 1000
    # gap 0-100: host 0-92, latency 92-100; gap 150-400: host 150-162, latency 162-212,
    # held 212-400
    assert row["cpu_launch"] // us == 100 + 12 + 50 and row["idle_other"] // us == 188


@pytest.mark.parametrize("run, label", [
    ("compute", "compute"), ("communication", "communication"), ("cpu_launch", "cpu_launch"),
    ("data_loading", "data_loading"), ("host_sync", "host_sync"), ("round_trip", "host_work")])
def test_each_labelled_zoo_run_gets_its_label(run, label):
    """Ground truth: each script provokes its bottleneck on purpose (samples/zoo/README.md)."""
    ranks = analyze_breakdown(load_run(ZOO / run, cache=False)).tables["rank_breakdown"]
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
    # NCCL B 300-600 overlaps compute A (100-400) for 100 us; the blocking copy E is 50 us.
    assert table.loc[1, "comm_overlap_ns"] == 100_000
    assert table.loc[1, "blocking_copy_ns"] == 50_000
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
