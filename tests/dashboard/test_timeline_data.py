"""Server-side timeline shaping: lanes, busy-fraction bins, the events/bins switch."""

import time

import numpy as np
import pandas as pd
import pytest
from profkit.dashboard import figures as F
from profkit.dashboard import timeline_data as T


def events(n=4, kind="kernel", cls="compute", stream=7, tid=7, start=0, dur=1_000_000,
           gap=1_000_000):
    ts = start + np.arange(n) * (dur + gap)
    return pd.DataFrame({"ts_ns": ts, "dur_ns": dur, "name": [f"k{i}" for i in range(n)],
                         "kind": kind, "cls": cls, "stream": stream, "tid": tid})


def steps(*spans):
    return pd.DataFrame({"step": range(len(spans)), "ts_ns": [a for a, _ in spans],
                         "dur_ns": [b - a for a, b in spans], "gpu_ts_ns": [a for a, _ in spans],
                         "gpu_end_ns": [b for _, b in spans]})


NO_COUNTERS = pd.DataFrame(columns=["ts_ns", "device", "metric", "value"])


def test_busy_fraction_exact_on_partial_and_spanning_intervals():
    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    busy = T.busy_fraction(np.array([0.5, 2.0]), np.array([1.5, 4.5]), edges)
    assert busy == pytest.approx([0.5, 0.5, 1.0, 1.0])


def test_busy_fraction_caps_nested_intervals_at_one():
    busy = T.busy_fraction(np.array([0.0, 0.0]), np.array([2.0, 2.0]), np.array([0.0, 1.0, 2.0]))
    assert busy == pytest.approx([1.0, 1.0])


def test_lanes_gpu_streams_first_and_annotations_left_out():
    ev = pd.concat([events(kind="cpu_op", cls="", stream=-1, tid=42, n=9),
                    events(stream=17), events(stream=7),
                    events(kind="gpu_annotation", cls="", stream=7, n=1)])
    table = T.lane_table(ev, base_ns=0)
    assert T.lane_order(table) == ["GPU stream 7", "GPU stream 17", "CPU thread 42"]
    assert len(table) == 17
    assert table.iloc[-1]["end_ms"] == pytest.approx(7.0)  # ms after base


def test_view_switches_to_bins_above_the_event_budget_and_back_when_zoomed():
    table = T.lane_table(events(n=100), base_ns=0)  # 100 x (1 ms busy, 1 ms idle)
    view = T.timeline_view(table, steps((0, 200_000_000)), NO_COUNTERS, 0, max_events=50,
                           n_bins=100)
    assert view.mode == "bins" and view.n_events == 100
    assert view.bins["busy"].to_numpy() == pytest.approx(0.5)  # 2 ms bins: 1 ms busy each
    assert len(view.bins) == 100
    zoomed = T.timeline_view(table, steps((0, 200_000_000)), NO_COUNTERS, 0, window=(0.0, 9.5),
                             max_events=50)
    assert zoomed.mode == "events" and zoomed.n_events == 5


def test_counters_kept_near_the_window_only():
    counters = pd.DataFrame({"ts_ns": [0, 5_000_000, 100_000_000], "device": 0,
                             "metric": "power_w", "value": [1.0, 2.0, 3.0]})
    table = T.lane_table(events(n=2), 0)
    view = T.timeline_view(table, steps((0, 4_000_000)), counters, 0, window=(0.0, 4.0))
    assert list(view.counters["value"]) == [1.0, 2.0]


@pytest.mark.parametrize("relayout, expected", [
    ({"xaxis.range[0]": 1, "xaxis.range[1]": 2}, (1.0, 2.0)),
    ({"xaxis2.range[0]": 3, "xaxis2.range[1]": 4.5}, (3.0, 4.5)),
    ({"xaxis.autorange": True}, None),
    ({"yaxis.range[0]": 1, "yaxis.range[1]": 2}, "keep"),
    (None, "keep"),
    # no window can be binned from these: NaN, infinite, or a width beyond float range
    ({"xaxis.range[0]": "nan", "xaxis.range[1]": 2}, "keep"),
    ({"xaxis.range[0]": 0, "xaxis.range[1]": float("inf")}, "keep"),
    ({"xaxis.range[0]": -1e308, "xaxis.range[1]": 1e308}, "keep"),
    ({"xaxis.range[0]": 10**400, "xaxis.range[1]": 1}, "keep"),
    ({"xaxis.range[0]": [1], "xaxis.range[1]": 2}, "keep"),
])
def test_parse_window(relayout, expected):
    assert T.parse_window(relayout) == expected


def test_a_million_events_bin_quickly_and_draw_as_heatmaps():
    n = 1_000_000
    rng = np.random.default_rng(0)
    ts = np.sort(rng.integers(0, 10_000_000_000, n))
    ev = pd.DataFrame({"ts_ns": ts, "dur_ns": rng.integers(1_000, 20_000, n), "name": "k",
                       "kind": "kernel", "cls": rng.choice(["compute", "communication"], n),
                       "stream": rng.choice([7, 17, 21], n), "tid": 0})
    table = T.lane_table(ev, 0)
    start = time.perf_counter()
    view = T.timeline_view(table, steps((0, 10_000_000_000)), NO_COUNTERS, 0)
    fig = F.timeline_figure(view, "rank 0")
    elapsed = time.perf_counter() - start
    assert view.mode == "bins" and view.n_events == n
    assert {t.type for t in fig.data} == {"heatmap"}
    assert sum(len(t.x) for t in fig.data) <= 2 * T.N_BINS
    assert elapsed < 3.0, f"binning 1M events took {elapsed:.2f} s"


def test_timeline_figure_events_mode_draws_segments_per_class():
    ev = pd.concat([events(n=3), events(n=2, cls="communication", stream=17)])
    view = T.timeline_view(T.lane_table(ev, 0), steps((0, 6_000_000)), NO_COUNTERS, 0)
    fig = F.timeline_figure(view, "rank 0")
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"compute", "communication"}
    assert by_name["compute"].line.color == F.CLASS_COLORS["compute"]
    assert list(by_name["communication"].x[:3]) == [0.0, 1.0, None]
    assert fig.layout.yaxis.categoryarray[-1] == "GPU stream 7"  # top lane


def test_counters_hold_their_value_across_a_short_window():
    import pandas as pd
    from profkit.dashboard.timeline_data import counters_in_window

    # samples every 100 ms; a 30 ms window between two of them keeps both neighbours
    c = pd.DataFrame({"ts_ns": [0, 100_000_000, 200_000_000, 300_000_000], "device": 0,
                      "metric": pd.Categorical(["sm_clock_mhz"] * 4),
                      "value": [1980.0, 1900.0, 1800.0, 1700.0]})
    got = counters_in_window(c, 0, 120.0, 150.0)
    assert got["t_ms"].tolist() == [100.0, 200.0] and got["value"].tolist() == [1900.0, 1800.0]
    assert counters_in_window(c.iloc[:0], 0, 0.0, 1.0).empty
