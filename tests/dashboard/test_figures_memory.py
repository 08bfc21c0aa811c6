"""The Memory page's pure parts: the points, the figure, the Overview's tile and the table of
what is live at the peak, on the H200 memory samples (values from the raw trace JSON and the
workload's labels, tests/memory_samples.py) and on small hand-made tables."""

import pandas as pd
import pytest
from profkit.dashboard.figures import memory as M
from profkit.dashboard.pages import memory as page
from profkit.dashboard.pages.counters import all_steps
from profkit.dashboard.pages.timeline import base_ns

from profkit.run.loader import load_run
from tests.analysed import analysed
from tests.memory_samples import MEMORY, raw_cuda_memory_events, raw_trace, steady_peak

B32 = MEMORY / "gpt_b32"


@pytest.fixture(scope="module")
def b32():
    return load_run(B32), analysed(B32)


def test_points_hold_the_traces_highest_totals_of_the_gpu_only(b32):
    run, _a = b32
    points = page.points(run)
    raw = raw_cuda_memory_events(raw_trace("gpt_b32"))
    assert set(points["metric"]) == {"allocated", "reserved"}
    assert set(points["device"]) == {0} and set(points["rank"]) == {0}
    got = points.groupby("metric")["bytes"].agg(["max", "min"])
    assert got.loc["allocated", "max"] == max(e["args"]["Total Allocated"] for e in raw) \
        == steady_peak("gpt_b32", "peak_allocated_bytes")
    assert got.loc["reserved", "max"] == max(e["args"]["Total Reserved"] for e in raw) \
        == steady_peak("gpt_b32", "peak_reserved_bytes")
    assert got.loc["allocated", "min"] == min(e["args"]["Total Allocated"] for e in raw)
    assert (points.groupby("metric").size() <= M.POINTS_PER_SERIES).all()


def test_figure_marks_the_peak_draws_capacity_and_the_step_bands(b32):
    run, a = b32
    steps = all_steps(run)
    capacity = raw_trace("gpt_b32")["deviceProperties"][0]["totalGlobalMem"]
    fig = M.memory_figure(page.points(run), steps, base_ns(run), [capacity])
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    assert set(lines) == {"rank 0 allocated", "rank 0 reserved"}
    assert lines["rank 0 allocated"].line.shape == "hv"
    assert max(lines["rank 0 allocated"].y) == pytest.approx(5.296850944)
    [star] = [t for t in fig.data if t.mode == "markers"]
    assert list(star.y) == [pytest.approx(5.296850944)]
    hlines = [s for s in fig.layout.shapes if s.y0 == s.y1 and s.y0 is not None]
    assert [s.y0 for s in hlines] == [pytest.approx(capacity / 1e9)]
    bands = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(bands) == len(steps) >= 3
    texts = [ann.text for ann in fig.layout.annotations]
    assert "peak 5.30 GB" in texts and "capacity 150.1 GB" in texts
    # the y axis shows the capacity first; a button fits it to the data (the reserved peak)
    assert fig.layout.yaxis.range[1] == pytest.approx(1.05 * capacity / 1e9)
    [menu] = fig.layout.updatemenus
    ranges = {b.label: b.args[0]["yaxis.range"][1] for b in menu.buttons}
    assert ranges == {"up to the capacity": pytest.approx(1.05 * capacity / 1e9),
                      "up to the data": pytest.approx(1.05 * 5.429526528)}


def test_no_points_is_a_message_not_an_empty_chart():
    fig = M.memory_figure(pd.DataFrame(columns=list(M.POINT_COLUMNS)), pd.DataFrame(
        columns=["step", "ts_ns", "dur_ns", "gpu_ts_ns", "gpu_end_ns"]), 0)
    assert fig.data == () and [a.text for a in fig.layout.annotations] == [M.NO_MEMORY]


def _points(rows):
    return pd.DataFrame(rows, columns=list(M.POINT_COLUMNS))


def test_many_ranks_draw_the_highest_peaks_and_name_devices_of_one_rank():
    rows = []
    for rank in range(10):
        for t, value in ((0, 1), (10, 100 + rank), (20, 5)):
            rows += [(rank, 0, "allocated", t, value), (rank, 0, "reserved", t, 2 * value)]
    rows += [(9, 1, "allocated", 30, 1_000), (9, 1, "reserved", 30, 1_000)]
    fig = M.memory_figure(_points(rows), pd.DataFrame(
        columns=["step", "ts_ns", "dur_ns", "gpu_ts_ns", "gpu_end_ns"]), 0)
    named = [t.name for t in fig.data if t.mode == "lines"]
    assert len(named) == 2 * M.MAX_LINES
    # rank 9's GPU 1 (1000 B) first, then ranks 9..3 by their peaks; ranks 0-2 left out
    assert named[0] == "rank 9 GPU 1 allocated" and named[2] == "rank 9 GPU 0 allocated"
    assert {n.split(" allocated")[0] for n in named[::2]} == \
        {"rank 9 GPU 1", "rank 9 GPU 0", *(f"rank {r}" for r in range(3, 9))}


def test_peaks_take_the_first_instant_of_each_highest_value():
    top = M.peaks(_points([(0, 0, "allocated", 5, 7), (0, 0, "allocated", 9, 7),
                           (0, 0, "reserved", 1, 99), (1, 0, "allocated", 2, 3)]))
    assert top.values.tolist() == [[0, 0, 5, 7], [1, 0, 2, 3]]


def test_the_overview_tile_reads_the_labelled_peak_and_the_capacity(b32):
    _run, a = b32
    text = str(page.peak_tile(a))
    capacity = raw_trace("gpt_b32")["deviceProperties"][0]["totalGlobalMem"]
    alloc = steady_peak("gpt_b32", "peak_allocated_bytes")
    reserved = steady_peak("gpt_b32", "peak_reserved_bytes")
    assert f"{alloc / 1e9:.1f} / {capacity / 1e9:.1f} GB" in text  # 5.3 / 150.1 GB
    assert f"({alloc / capacity:.1%} of the GPU)" in text  # 3.5%
    assert f"{reserved / 1e9:.1f} GB" in text
    assert f"{(capacity - reserved) / 1e9:.1f} GB" in text  # headroom 144.7 GB
    assert "~33x" in text  # the headroom finding's what-if (FIT.txt: 1024 fits, 2048 not)


def test_the_tile_of_a_run_without_memory_says_how_to_capture_it():
    a = analysed(B32)  # a copy of its own: this test changes it
    a.tables["memory_ranks"] = a.table("memory_ranks").iloc[0:0]
    assert M.NO_MEMORY in str(page.peak_tile(a))


def test_live_at_peak_reads_the_analysis_table_largest_first_or_none():
    a = analysed(B32)  # a copy of its own: this test changes it
    a.tables.pop(page.LIVE_TABLE, None)
    assert page.live_at_peak(a) is None
    assert "not available" in str(page.live_card(a))
    a.tables[page.LIVE_TABLE] = pd.DataFrame({
        "rank": [0, 0], "device": [0, 0], "op": ["aten::mm", "aten::gelu"],
        "live_bytes": [1_000_000_000, 3_000_000_000], "count": [4, 2]})
    live = page.live_at_peak(a)
    assert live["op"].tolist() == ["aten::gelu", "aten::mm"]
    shown = page._in_gb(live)
    assert shown["live_gb"].tolist() == [3.0, 1.0] and "live_bytes" not in shown
    assert "not available" not in str(page.live_card(a))


def test_a_tile_without_the_devices_memory_gives_the_peaks_alone():
    """A trace without device properties or run.json's gpus: no capacity, so no share of
    it, no headroom and no batch growth (the analysis gives none)."""
    a = analysed(B32)  # a copy of its own: this test changes it
    ranks = a.table("memory_ranks").copy()
    ranks["capacity_bytes"] = float("nan")
    ranks["batch_headroom_x"] = float("nan")
    a.tables["memory_ranks"] = ranks
    text = str(page.peak_tile(a))
    assert "'5.3 GB'" in text and "'5.4 GB'" in text
    assert "of the GPU" not in text and "headroom" not in text and "grow" not in text


def test_a_tile_near_capacity_says_nothing_of_growing_the_batch():
    """Under the headroom finding's 2x (a run that grows its batch to out-of-memory reads
    1.05x) the tile gives no batch growth: '~1x' would be no advice."""
    a = analysed(B32)  # a copy of its own: this test changes it
    a.tables["memory_ranks"] = a.table("memory_ranks").assign(batch_headroom_x=1.05)
    text = str(page.peak_tile(a))
    assert "grow" not in text and "~1x" not in text and "headroom" in text
