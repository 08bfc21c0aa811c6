"""The timeline figure from hand-made views: lanes as labelled rows, busy fraction per bin
decoded back from the heatmap, step bands per rank (steps left out marked and explained),
collectives linked at their starts, NVML samples held with markers and counted."""

import math

import numpy as np
import pandas as pd
import pytest
from profkit.dashboard.colors import CLASS_COLORS, PART_COLORS
from profkit.dashboard.figures import timeline as FT
from profkit.dashboard.timeline.view import TimelineView

LANES = ["rank 1 · GPU stream 7", "rank 1 · GPU idle cause", "rank 0 · GPU stream 7",
         "rank 0 · GPU idle cause"]


def view(**kw) -> TimelineView:
    base = dict(ranks=[1, 0], lanes=LANES, rank_of={lane: int(lane[5]) for lane in LANES},
                layer_of={lane: "cause" if "cause" in lane else "gpu" for lane in LANES},
                x0_ms=0.0, x1_ms=10.0, full_ms=(0.0, 10.0), mode="events", compact=False,
                n_events=0)
    base.update(kw)
    return TimelineView(**base)


def steps(rows):
    return pd.DataFrame(rows, columns=["rank", "step", "start_ms", "end_ms", "used", "reason"])


def test_lanes_are_labelled_rows_top_first_straggler_in_red():
    ev = pd.DataFrame({"lane": [LANES[0], LANES[3]], "group": ["compute", "cpu_launch"],
                       "name": ["gemm", "cpu_launch"], "start_ms": [1.0, 2.0],
                       "end_ms": [1.5, 2.5], "rank": [1, 0], "layer": ["gpu", "cause"],
                       "row": [4, 9]})
    fig = FT.timeline_figure(view(events=ev, n_events=2), stragglers=[1])
    assert list(fig.layout.yaxis.tickvals) == [3, 2, 1, 0]
    assert fig.layout.yaxis.ticktext[2] == LANES[2]
    assert "#dc2626" in fig.layout.yaxis.ticktext[0] and LANES[0] in fig.layout.yaxis.ticktext[0]
    by_name = {t.name: t for t in fig.data}
    assert by_name["cpu_launch"].y[0] == 0  # the bottom lane
    assert by_name["cpu_launch"].marker.color == PART_COLORS["cpu_launch"]


def test_events_are_bars_that_hover_anywhere_and_say_which_event_a_click_is():
    """A horizontal bar from start to end (hover and click anywhere on it, not only near
    its ends as on a line), carrying (rank, layer, row) for the click's details."""
    ev = pd.DataFrame({"lane": [LANES[0]], "group": ["compute"], "name": ["gemm"],
                       "start_ms": [1.0], "end_ms": [1.5], "rank": [1], "layer": ["gpu"],
                       "row": [4]})
    fig = FT.timeline_figure(view(events=ev, n_events=1))
    (bar,) = [t for t in fig.data if t.name == "compute"]
    assert bar.type == "bar" and bar.orientation == "h" and fig.layout.barmode == "overlay"
    assert list(bar.base) == [1.0] and list(bar.x) == pytest.approx([0.5]) and list(bar.y) == [3]
    assert list(bar.customdata[0]) == [1, "gpu", 4] and bar.hovertext[0] == "gemm (500.0 us)"
    assert 0.5 <= bar.width <= 0.9 and fig.layout.hovermode == "closest"


def test_a_threads_depth_rows_name_the_thread_once():
    lanes = ["rank 0 · GPU stream 7", "rank 0 · thread 9 (python3) · depth 0",
             "rank 0 · thread 9 (python3) · depth 1", "rank 0 · thread 12 · depth 3"]
    v = view(ranks=[0], lanes=lanes, rank_of=dict.fromkeys(lanes, 0),
             layer_of={lane: "gpu" if "GPU" in lane else "cpu" for lane in lanes})
    assert FT.tick_labels(v, set()) == ["rank 0 · GPU stream 7",
                                        "rank 0 · thread 9 (python3) · depth 0", "depth 1",
                                        "rank 0 · thread 12 · depth 3"]


def test_step_labels_stay_inside_the_plot():
    """A step that began before the window is labelled at the window's left edge; one that
    begins near the right edge is labelled right-aligned at its visible end; a step too
    narrow in the window for a label gets none."""
    s = steps([[1, 2, -3.0, 2.0, True, ""], [1, 3, 2.0, 2.05, True, ""],
               [1, 4, 2.05, 9.7, True, ""], [1, 5, 9.7, 14.0, True, ""]])
    fig = FT.timeline_figure(view(steps=s))
    labels = {a.text: a for a in fig.layout.annotations if a.text.startswith("step")}
    assert set(labels) == {"step 2", "step 4", "step 5"}
    assert (labels["step 2"].x, labels["step 2"].xanchor) == (0.0, "left")
    assert (labels["step 4"].x, labels["step 4"].xanchor) == (2.05, "left")
    assert (labels["step 5"].x, labels["step 5"].xanchor) == (10.0, "right")


def test_bins_are_one_heatmap_whose_cells_decode_to_group_and_busy_fraction():
    bins = pd.DataFrame({"lane": [LANES[0], LANES[0], LANES[1], LANES[3]],
                         "bin_ms": [0.0, 5.0, 5.0, 0.0], "busy": [1.0, 0.25, 0.5, 0.1],
                         "group": ["compute", "communication", "cpu_launch", "host_sync"]})
    fig = FT.timeline_figure(view(mode="bins", bins=bins, bin_ms=5.0))
    (hm,) = [t for t in fig.data if t.type == "heatmap"]
    groups = ["compute", "communication", "cpu_launch", "host_sync"]  # GROUP_COLORS order
    assert list(hm.x) == [2.5, 7.5] and list(hm.y) == [0, 1, 2, 3]
    z = np.array(hm.z, dtype=float)
    cells = {(3, 0): ("compute", 1.0), (3, 1): ("communication", 0.25),
             (2, 1): ("cpu_launch", 0.5), (0, 0): ("host_sync", 0.1)}
    for (row, col), (group, busy) in cells.items():
        assert groups[int(z[row, col])] == group
        assert (z[row, col] % 1) / 0.999 == pytest.approx(busy, abs=1e-9)
        assert hm.customdata[row][col] == pytest.approx(busy)
    assert np.isnan(z[1, 0]) and hm.customdata[1][0] is None  # rank 0's GPU lane is idle
    scale = dict((round(p * 4, 3), c) for p, c in hm.colorscale)
    assert scale[0.999] == CLASS_COLORS["compute"] and scale[4.0] == PART_COLORS["host_sync"]
    assert (hm.zmin, hm.zmax) == (0, 4)


def test_step_bands_per_rank_left_out_steps_amber_with_their_reason():
    s = steps([[1, 2, 0.0, 4.0, False, "first recorded step (profiler start-up): 1.3x"],
               [1, 3, 4.0, 9.0, True, ""], [0, 2, 0.5, 4.5, True, ""]])
    fig = FT.timeline_figure(view(steps=s))
    bands = {sh.name: sh for sh in fig.layout.shapes}
    assert set(bands) == {"step 2 · rank 1 · left out", "step 3 · rank 1", "step 2 · rank 0"}
    left = bands["step 2 · rank 1 · left out"]
    assert (left.x0, left.x1, left.y0, left.y1) == (0.0, 4.0, 1.5, 3.5)  # over rank 1's lanes
    assert left.fillcolor == FT.LEFT_OUT_FILL and left.line.dash == "dash"
    assert bands["step 3 · rank 1"].fillcolor != FT.LEFT_OUT_FILL
    assert (bands["step 2 · rank 0"].y0, bands["step 2 · rank 0"].y1) == (-0.5, 1.5)
    labels = {a.text: a for a in fig.layout.annotations if a.text.startswith("step")}
    assert "profiler start-up" in labels["step 2 · left out"].hovertext
    assert labels["step 3"].hovertext == "used for the verdict"


def test_too_many_bands_draw_the_first_ranks_over_every_lane():
    rows = [[r, k, float(k), k + 1.0, True, ""] for r in (1, 0) for k in range(FT.MAX_BANDS)]
    fig = FT.timeline_figure(view(steps=steps(rows)))
    assert len(fig.layout.shapes) == FT.MAX_BANDS
    assert {(s.y0, s.y1) for s in fig.layout.shapes} == {(-0.5, 3.5)}
    assert all(s.name.endswith("rank 1") for s in fig.layout.shapes)


def test_collectives_are_lines_through_each_ranks_start():
    links = pd.DataFrame({"key": ["a", "a", "b", "b"], "rank": [1, 0, 1, 0],
                          "lane": [LANES[0], LANES[2]] * 2, "start_ms": [3.0, 1.0, 8.0, 7.5],
                          "collective": "all_reduce", "bytes": 2.0**25, "skew_ms": [2.0, 2.0, 0.5, 0.5],
                          "last_rank": 1})
    fig = FT.timeline_figure(view(links=links))
    (line,) = [t for t in fig.data if t.name == "collective arrival"]
    assert list(line.x) == [3.0, 1.0, None, 8.0, 7.5, None]
    assert list(line.y) == [3, 1, None, 3, 1, None]
    # 2**25 bytes in decimal MB, as the text report and the tables print sizes (was 32.0 MiB)
    assert "all_reduce 33.6 MB" in line.text[0] and "start skew 2.0 ms" in line.text[0]


def test_counters_are_held_samples_with_markers_counted_in_the_window():
    c = pd.DataFrame({"rank": [1, 1, 1, 0], "metric": "gpu_util_pct",
                      "t_ms": [-50.0, 5.0, 60.0, 2.0], "value": [10.0, 96.0, 50.0, 7.0],
                      "inside": [False, True, False, True]})
    periods = {(1, "gpu_util_pct"): 100.0, (0, "gpu_util_pct"): 100.0}
    fig = FT.timeline_figure(view(counters=c, periods_ms=periods, x0_ms=0.0, x1_ms=31.0),
                             all_counters=True)  # one sample each: drawn when asked
    series = [t for t in fig.data if t.name in ("rank 1", "rank 0")]
    assert [t.name for t in series] == ["rank 1", "rank 0"]
    assert all(t.line.shape == "hv" and "markers" in t.mode for t in series)
    assert list(series[0].x) == [-50.0, 5.0, 60.0]  # the values held into the window too
    titles = [a.text for a in fig.layout.annotations if a.text.startswith("gpu_util_pct")]
    assert titles == ["gpu_util_pct (%): rank 1: 1, rank 0: 1 sample(s) in this 31.0 ms "
                      "window (one every ~100 ms)"]
    assert fig.layout.yaxis2.title.text == "%"
    assert list(fig.layout.xaxis.range) == [0.0, 31.0] and list(fig.layout.xaxis2.range) == [0.0, 31.0]


@pytest.mark.parametrize("metric, unit", [("gpu_util_pct", "%"), ("sm_clock_mhz", "MHz"),
                                          ("power_w", "W"), ("mem_used_bytes", "GB"),
                                          ("pcie_tx_mibps", "MB/s"),
                                          ("temp_c", "°C"), ("odd", "")])
def test_units_from_metric_names(metric, unit):
    assert FT.unit_of(metric) == unit


def test_sizes_read_in_decimal_units_as_the_report_prints_them():
    c = pd.DataFrame({"rank": [0, 0], "metric": "pcie_tx_mibps", "t_ms": [1.0, 2.0],
                      "value": [1000.0, 2000.0], "inside": [True, True]})
    fig = FT.timeline_figure(view(counters=c, periods_ms={(0, "pcie_tx_mibps"): 20.0},
                                  x0_ms=0.0, x1_ms=31.0), all_counters=True)
    (series,) = [t for t in fig.data if t.name == "rank 0"]
    assert list(series.y) == pytest.approx([1048.576, 2097.152])  # MiB/s -> MB/s
    assert "MB/s" in series.hovertemplate and "MiB" not in series.hovertemplate


def test_the_left_margin_holds_the_longest_lane_label():
    assert FT.label_margin_px(["rank 0 · GPU stream 7"]) == FT.MIN_MARGIN_PX
    cpu = "rank 0 · thread 1099 (pt_autograd_0) · depth 0"  # 46 characters: 230 px cut it
    assert FT.label_margin_px([cpu]) >= 6 * len(cpu)
    long = "rank 0 · thread 12 (" + "x" * 80 + ") · depth 3"
    (clipped,) = FT.tick_labels(type("V", (), {"lanes": [long], "rank_of": {long: 0}})(), ())
    assert len(clipped) == FT.MAX_LABEL_CHARS and clipped.startswith("rank 0 · thread 12")
    assert clipped.endswith(") · depth 3") and FT.label_margin_px([clipped]) <= FT.MAX_MARGIN_PX


def test_counters_too_slow_for_the_window_are_collapsed_until_asked_for():
    """gpu_util read every 100 ms has 1 sample in a 31 ms window: its row is left out
    unless asked for; power read every 5 ms has 6 and is drawn."""
    util = pd.DataFrame({"rank": 0, "metric": "gpu_util_pct", "t_ms": [-50.0, 20.0],
                         "value": [96.0, 5.0], "inside": [False, True]})
    power = pd.DataFrame({"rank": 0, "metric": "power_w", "t_ms": np.arange(1.0, 31.0, 5.0),
                          "value": 300.0, "inside": True})
    v = view(ranks=[0], counters=pd.concat([util, power], ignore_index=True),
             periods_ms={(0, "gpu_util_pct"): 100.0, (0, "power_w"): 5.0}, x0_ms=0.0, x1_ms=31.0)
    assert FT.resolvable_metrics(v) == ["power_w"]
    titles = [a.text for a in FT.timeline_figure(v).layout.annotations if "window" in a.text]
    assert [t.split(" ")[0] for t in titles] == ["power_w"]
    shown = FT.timeline_figure(v, all_counters=True)
    assert [a.text.split(" ")[0] for a in shown.layout.annotations if "window" in a.text] == \
        ["gpu_util_pct", "power_w"]


def test_a_series_without_samples_says_so():
    c = pd.DataFrame({"rank": [0], "metric": "power_w", "t_ms": [-5.0], "value": [120.0],
                      "inside": [False]})
    fig = FT.timeline_figure(view(ranks=[0], counters=c,
                                  periods_ms={(0, "power_w"): math.nan}), all_counters=True)
    titles = [a.text for a in fig.layout.annotations if a.text.startswith("power_w")]
    assert titles == ["power_w (W): 0 sample(s) in this 10.0 ms window"]
