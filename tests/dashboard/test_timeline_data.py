"""Server-side timeline shaping on a hand-built trace whose every number is chosen by hand:
lanes, nesting depth, the GPU-idle cause lane, disjoint step windows, busy fraction per
bin (covered time over bin length), the events/bins switch, compact rows, counters."""

import numpy as np
import pandas as pd
import pytest
from profkit.dashboard.timeline import data as TD
from profkit.dashboard.timeline import view as TV

from profkit.run.loader import load_run
from tests.dashboard import timeline_hand
from tests.dashboard.conftest import STRAGGLER
from tests.factories import trace_doc, write_trace, x

GPU_LANE, CAUSE_LANE = "rank 0 · GPU stream 7", "rank 0 · GPU idle cause"


@pytest.fixture(scope="module")
def hand_run(tmp_path_factory):
    return timeline_hand.hand_run(tmp_path_factory.mktemp("hand"))


@pytest.fixture(scope="module")
def lanes(hand_run):
    origin = TD.origin_ns(hand_run)
    return [TD.rank_lanes(hand_run.ranks[r], origin) for r in (0, 1)]


def spans(frame: pd.DataFrame, group: str) -> list[tuple[float, float]]:
    g = frame[frame["group"] == group]
    return list(zip(g["start_ms"].round(6), g["end_ms"].round(6)))


def test_coverage_counts_overlaps_once_and_bins_hold_covered_time():
    # [0, 2) and [1, 3) overlap: covered [0, 3); plus [5, 6)
    cov = TD.Coverage.of(np.array([0, 1, 5]), np.array([2, 3, 6]))
    assert cov.per_bin_ns(np.array([0, 1, 2, 4, 6])).tolist() == [1, 1, 1, 1]
    assert cov.per_bin_ns(np.array([-5, 0, 10])).tolist() == [0, 4]
    assert TD.Coverage.of(np.array([], int), np.array([], int)).per_bin_ns(
        np.array([0, 1])).tolist() == [0]


@pytest.mark.parametrize("starts, ends, depth", [
    # step > op > launch, a sibling op, then a second step
    ([0, 1, 2, 5, 10], [10, 4, 3, 9, 12], [0, 1, 2, 1, 0]),
    ([0, 0, 3], [5, 5, 4], [0, 1, 2]),  # same start and end: the later is inside
    ([0, 2, 2], [4, 3, 2], [0, 1, 2]),  # an empty range inside a range starting with it
    ([], [], []),
])
def test_nesting_depth(starts, ends, depth):
    assert TD.nesting_depth(np.array(starts), np.array(ends)).tolist() == depth


def test_lanes_of_a_rank_gpu_then_cause_then_cpu_by_depth(lanes):
    r = lanes[0]
    assert r.lanes == [GPU_LANE, CAUSE_LANE, "rank 0 · thread 100 · depth 0",
                       "rank 0 · thread 100 · depth 1", "rank 0 · thread 100 · depth 2"]
    cpu = r.events["cpu"]
    depth2 = cpu[cpu["lane"] == "rank 0 · thread 100 · depth 2"]
    assert depth2["name"].astype(str).tolist() == ["cudaLaunchKernel"]  # the one inside aten::mm
    assert r.rows() == ["rank 0 · GPU", "rank 0 · GPU idle cause", "rank 0 · CPU"]


def test_cpu_threads_are_named_by_the_trace_with_only_the_depths_they_use(tmp_path):
    """Thread 100 named in the metadata, thread 200 not (its tid then), the profiler's own
    span (category Trace, on a thread called by a string) not drawn; thread 200 nests one
    range in another: two rows, not eight."""
    events = timeline_hand.hand_events() + [
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100,
         "args": {"name": "thread 100 (python3)"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": 100,
         "args": {"name": "thread 100 (pt_main)"}},  # a later name wins
        x("PyTorch Profiler (0)", "Trace", 0, 7000, pid="Spans", tid="PyTorch Profiler"),
        x("loader", "user_annotation", 100, 500, tid=200),
        x("aten::copy_", "cpu_op", 200, 100, tid=200)]
    run = load_run(write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1,
                                                                  events=events)), cache=False)
    r = TD.rank_lanes(run.ranks[0], TD.origin_ns(run))
    cpu = [lane for lane in r.lanes if r.layer_of[lane] == TD.CPU]
    assert cpu == ["rank 0 · thread 100 (pt_main) · depth 0", "rank 0 · thread 100 (pt_main) · depth 1",
                   "rank 0 · thread 100 (pt_main) · depth 2", "rank 0 · thread 200 · depth 0",
                   "rank 0 · thread 200 · depth 1"]
    assert "PyTorch Profiler (0)" not in set(r.events[TD.CPU]["name"].astype(str))
    assert TD.thread_labels([1, 1], [5, 6], {"1:5": "worker", "1:6": "worker"}) == [
        "worker (5)", "worker (6)"]


def test_a_window_shows_only_the_cpu_rows_it_has_events_on(lanes):
    """In [5.5, 6.5] ms only step 3's range (depth 0) runs on the host: one CPU row."""
    view = TV.timeline_view(lanes[:1], (5.5, 6.5), show_cpu=True)
    assert view.mode == "events"
    assert [lane for lane in view.lanes if view.layer_of[lane] == TD.CPU] == [
        "rank 0 · thread 100 · depth 0"]
    whole = TV.timeline_view(lanes[:1], None, show_cpu=True)
    assert sum(whole.layer_of[lane] == TD.CPU for lane in whole.lanes) == 3


def test_cause_lane_is_the_charged_idle_time(lanes):
    cause = lanes[0].events["cause"]
    assert spans(cause, "host_work") == [(0.0, 0.9), (2.0, 2.4)]  # before the launch calls
    assert spans(cause, "cpu_launch") == [(0.9, 0.96), (2.4, 2.42)]
    assert spans(cause, "idle_other") == [(0.96, 1.0)]
    assert set(cause["group"].astype(str)) == {"host_work", "cpu_launch", "idle_other"}


def test_steps_are_the_disjoint_windows_not_cpu_start_to_gpu_end(lanes):
    steps = lanes[0].steps
    # CPU start to GPU end would be step 2 [0, 5), step 3 [3, 7): overlapping
    assert steps[["step", "start_ms", "end_ms"]].values.tolist() == [[2, 0.0, 5.0], [3, 5.0, 7.0]]
    assert steps["used"].all() and lanes[0].span_ms == (0.0, 7.0)


def test_step_status_marks_steps_left_out_with_their_reason(hand_run):
    status = pd.DataFrame({"rank": 0, "step": [2, 3], "used": [False, True],
                           "excluded_reason": ["first recorded step (profiler start-up)", ""]})
    steps = TD.step_table(hand_run.ranks[0], TD.origin_ns(hand_run), status)
    assert steps["used"].tolist() == [False, True]
    assert steps["reason"].tolist() == ["first recorded step (profiler start-up)", ""]


def test_bins_hold_busy_fraction_covered_over_bin_length(lanes):
    view = TV.timeline_view(lanes[:1], (0.0, 7.0), max_events=0, n_bins=7)
    assert view.mode == "bins" and view.bin_ms == pytest.approx(1.0)
    gpu = view.bins[view.bins["lane"] == GPU_LANE].set_index("bin_ms")["busy"]
    # kernels [1, 2), [2.42, 5), [5, 7): nothing in bin 0, 0.58 of bin 2
    assert gpu.index.tolist() == [1, 2, 3, 4, 5, 6]
    assert gpu.tolist() == pytest.approx([1, 0.58, 1, 1, 1, 1])
    cause = view.bins[view.bins["lane"] == CAUSE_LANE].set_index("bin_ms")
    assert cause["busy"].to_dict() == pytest.approx({0.0: 1.0, 2.0: 0.42})
    assert cause["group"].tolist() == ["host_work", "host_work"]  # 0.9 of bin 0


def test_nested_cpu_ranges_never_count_twice_in_a_compact_row(lanes):
    view = TV.timeline_view(lanes[:1], (0.0, 7.0), show_cpu=True, n_bins=7, compact_above=0)
    assert view.compact and view.lanes == lanes[0].rows()
    cpu = view.bins[view.bins["lane"] == "rank 0 · CPU"].set_index("bin_ms")["busy"]
    # the step annotations cover [0, 6) whole; the op and launches nested in them add nothing
    assert cpu.to_dict() == pytest.approx({float(b): 1.0 for b in range(6)})
    assert (view.bins["busy"] <= 1.0).all()


def test_events_until_the_budget_then_bins_and_back_when_zoomed(lanes):
    full = TV.timeline_view(lanes, None, max_events=5)
    assert (full.mode, full.n_events, (full.x0_ms, full.x1_ms)) == ("bins", 16, (0.0, 7.0))
    # in [1.5, 2.5] ms per rank: kernels [1, 2) and [2.42, 5), host_work [2, 2.4),
    # cpu_launch [2.4, 2.42)
    zoomed = TV.timeline_view(lanes, (1.5, 2.5), max_events=12)
    assert (zoomed.mode, zoomed.n_events, len(zoomed.events)) == ("events", 8, 8)
    with_cpu = TV.timeline_view(lanes, (1.5, 2.5), show_cpu=True, max_events=12)
    assert with_cpu.n_events == 12  # + the step 2 annotation and the launch 2.40..2.41
    # per rank: GPU, cause, depth 0 and 1 (the depth 2 row, aten::mm's launch at 0.9 ms,
    # has nothing in the window and is not drawn)
    assert with_cpu.lanes[:2] == [GPU_LANE, CAUSE_LANE] and len(with_cpu.lanes) == 8


def test_ranks_in_the_order_asked_and_compact_rows_above_the_cap(lanes):
    view = TV.timeline_view([lanes[1], lanes[0]], None)
    assert [view.rank_of[lane] for lane in view.lanes] == [1, 1, 0, 0]
    compact = TV.timeline_view(lanes, None, compact_above=1)
    assert compact.compact and compact.mode == "bins"
    assert compact.lanes == ["rank 0 · GPU", "rank 0 · GPU idle cause", "rank 1 · GPU",
                             "rank 1 · GPU idle cause"]


def test_steps_of_the_window_per_rank(lanes):
    view = TV.timeline_view(lanes, (5.5, 6.0))
    assert view.steps[["rank", "step"]].values.tolist() == [[0, 3], [1, 3]]


def counter_lanes(t_ms, metric="sm_clock_mhz"):
    c = pd.DataFrame({"metric": metric, "t_ms": t_ms, "value": np.arange(len(t_ms), dtype=float)})
    return TD.RankLanes(0, {}, [], {}, {}, pd.DataFrame(), c)


@pytest.mark.parametrize("window, times, inside", [
    ((120.0, 150.0), [100.0, 200.0], [False, False]),  # no sample inside: both neighbours
    ((90.0, 210.0), [0.0, 100.0, 200.0, 300.0], [False, True, True, False]),
    ((0.0, 50.0), [0.0, 100.0], [True, False]),
])
def test_counters_keep_the_samples_of_the_window_and_their_neighbours(window, times, inside):
    got, periods = TV.counters_in_window([counter_lanes([0.0, 100.0, 200.0, 300.0])], *window)
    assert got["t_ms"].tolist() == times and got["inside"].tolist() == inside
    assert periods == {(0, "sm_clock_mhz"): 100.0}


@pytest.mark.parametrize("relayout, expected", [
    ({"xaxis.range[0]": 1, "xaxis.range[1]": 2}, (1.0, 2.0)),
    ({"xaxis2.range[0]": 3, "xaxis2.range[1]": 4.5}, (3.0, 4.5)),
    ({"xaxis.range": [0.05, 56.97], "yaxis.autorange": True}, (0.05, 56.97)),  # a double-click
    ({"xaxis.range[0]": 5.0, "xaxis.range[1]": 1.0}, (1.0, 5.0)),
    ({"xaxis.autorange": True}, None),
    ({"xaxis.autorange": True, "xaxis.showspikes": False}, None),
    ({"xaxis.autorange": "yes"}, "keep"),
    ({"yaxis.range[0]": 1, "yaxis.range[1]": 2}, "keep"),
    ({"autosize": True}, "keep"),
    (None, "keep"), ({}, "keep"), ([1, 2], "keep"),
    # no window can be binned from these: NaN, infinite, or a width beyond float range
    ({"xaxis.range[0]": "nan", "xaxis.range[1]": 2}, "keep"),
    ({"xaxis.range[0]": 0, "xaxis.range[1]": float("inf")}, "keep"),
    ({"xaxis.range[0]": -1e308, "xaxis.range[1]": 1e308}, "keep"),
    ({"xaxis.range[0]": 10**400, "xaxis.range[1]": 1}, "keep"),
    ({"xaxis.range[0]": [1], "xaxis.range[1]": 2}, "keep"),
    ({"xaxis.range": [1, "x"]}, "keep"), ({"xaxis.range": [1]}, "keep"),
    ({"xaxis.range[0]": True, "xaxis.range[1]": 2}, "keep"),
])
def test_parse_window(relayout, expected):
    assert TV.parse_window(relayout) == expected


@pytest.mark.parametrize("window, expected", [
    (None, (0.0, 10.0)), ((2.0, 3.0), (2.0, 3.0)),
    ((-1e9, 1e9), (-10.0, 20.0)),  # at most one run length past either end
    ((4.0, 4.0), (4.0, 4.000001)),
])
def test_clamp_window(window, expected):
    assert TV.clamp_window(window, (0.0, 10.0)) == pytest.approx(expected)


def test_gpu_lanes_name_kernels_as_people_read_them():
    run = load_run(STRAGGLER, cache=False)
    raw = run.ranks[0].gpu_events["name"].astype(str)
    names = TD.rank_lanes(run.ranks[0], TD.origin_ns(run)).events["gpu"]["name"].astype(str)
    assert raw.str.len().max() > 150  # templated kernels
    assert names.str.len().max() <= 80
    assert any(n.startswith("nccl AllReduce") for n in names.unique())


def test_the_timeline_draws_nvml_metrics_then_a_few_of_the_traces_own_counters():
    """A trace's own counters (trace:...) share the counters table with NVML's: the
    timeline keeps NVML's metrics of its list, then the first MAX_TRACE_METRICS trace
    counters by name; an NVML metric outside the list stays out."""
    own = [f"trace:Memory/s{i}" for i in (5, 1, 3, 2, 4)]  # 5 series, out of order
    names = ["sm_clock_mhz", "fan_speed_pct", *own]
    counters = pd.DataFrame({"ts_ns": np.arange(len(names), dtype="int64") * 1000 + 5000,
                             "device": 0, "metric": pd.Categorical(names),
                             "value": np.arange(len(names), dtype=float)})
    assert TD.timeline_metrics(names) == [
        "sm_clock_mhz", "trace:Memory/s1", "trace:Memory/s2", "trace:Memory/s3",
        "trace:Memory/s4"]
    table = TD.counter_table(counters, origin=5000)
    assert sorted(table["metric"]) == TD.timeline_metrics(names)
    # times in ms after the origin, values as sampled (sm_clock_mhz was row 0, s1 row 3)
    row = table.set_index("metric")
    assert row.loc["sm_clock_mhz", "t_ms"] == 0.0 and row.loc["trace:Memory/s1", "t_ms"] == 0.003
    assert row.loc["trace:Memory/s1", "value"] == 3.0


def test_the_counters_page_says_nvml_only_when_the_counters_are_nvmls():
    from profkit.dashboard.pages import counters as page

    nvml = pd.DataFrame({"metric": ["sm_clock_mhz", "power_w"]})
    assert page._title(nvml) == "NVML counters"
    assert page._title(pd.concat([nvml, pd.DataFrame({"metric": ["trace:Memory/rss"]})])) == \
        "Counters"
