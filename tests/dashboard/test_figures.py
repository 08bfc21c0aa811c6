"""Figure functions on small hand-made tables: traces, axes and colours."""

import pandas as pd
import pytest
from profkit.analyzers.measure.breakdown import PARTS
from profkit.dashboard.figures import charts as F


def rank_table(fracs=None):
    fracs = fracs or {"compute": 0.5, "communication": 0.3, "cpu_launch": 0.2}
    row = {p: fracs.get(p, 0.0) for p in PARTS}
    return pd.DataFrame([{"rank": 0, "step_time_ms": 10.0, **row},
                         {"rank": 1, "step_time_ms": 20.0, **row}])


def step_table():
    rows = []
    for rank in (0, 1):
        for step in (5, 6):
            parts = {p: 0 for p in PARTS}
            parts["compute"] = 1_000_000 * (1 + rank + step)
            rows.append({"rank": rank, "step": step, "step_ns": parts["compute"], **parts})
    return pd.DataFrame(rows)


# the parts as the reports name them (profkit.analyzers.analyze.part_name), in PARTS order
SHOWN_PARTS = ["compute", "communication", "pipeline bubble (a stage waits for its neighbours)",
               "transfer", "launch overhead", "host work",
               "data loading", "host sync", "held work (queued, waiting on a stream or event)"]


def test_breakdown_bars_stack_parts_in_order_with_part_colours():
    fig = F.breakdown_bars(rank_table({"compute": 0.5, "pipeline_bubble": 0.3,
                                       "cpu_launch": 0.2}))
    assert [t.name for t in fig.data] == SHOWN_PARTS
    assert fig.layout.showlegend is False  # an HTML legend instead: part_legend
    assert list(F.part_legend()) == SHOWN_PARTS
    assert [t.marker.color for t in fig.data] == [F.PART_COLORS[p] for p in PARTS]
    assert fig.layout.barmode == "stack"
    compute = fig.data[0]
    assert list(compute.x) == ["rank 0", "rank 1"]
    assert list(compute.y) == pytest.approx([5.0, 10.0])  # fraction x step ms


def test_an_idle_optional_part_is_neither_drawn_nor_in_the_legend():
    """No rank has pipeline-bubble time (not a pipeline): left out, as the text report's
    rank table leaves it out (parts.py: optional); the other parts stay, zero or not."""
    without = [n for n in SHOWN_PARTS if not n.startswith("pipeline bubble")]
    ranks = rank_table()
    assert [t.name for t in F.breakdown_bars(ranks).data] == without
    assert list(F.part_legend(ranks)) == without
    assert [t.name for t in F.rank_steps_bars(step_table(), 0).data] == without


def test_breakdown_bars_call_out_the_straggler():
    fig = F.breakdown_bars(rank_table(), stragglers=[1])
    notes = [a for a in fig.layout.annotations if a.text == "straggler"]
    assert len(notes) == 1 and notes[0].x == "rank 1" and notes[0].y == pytest.approx(20.0)
    assert not [a for a in F.breakdown_bars(rank_table()).layout.annotations
                if a.text == "straggler"]


def test_step_heatmap_is_rank_by_step_in_ms():
    fig = F.step_heatmap(step_table())
    hm = fig.data[0]
    assert list(hm.x) == ["step 5", "step 6"] and list(hm.y) == ["rank 0", "rank 1"]
    assert hm.z[1][0] == pytest.approx(7.0)  # rank 1, step 5: 1 + 1 + 5 ms


def test_step_heatmap_marks_the_steps_left_out_with_why():
    steps = step_table().assign(used=[True, True, True, False],
                                excluded_reason=["", "", "", "one-off step: 1.4x the median"])
    fig = F.step_heatmap(steps)
    marks = [t for t in fig.data if t.name == F.LEFT_OUT]
    assert len(marks) == 1 and list(marks[0].x) == ["step 6"] and list(marks[0].y) == ["rank 1"]
    assert "one-off step: 1.4x the median" in marks[0].text[0] and marks[0].showlegend
    hm = fig.data[0]
    assert hm.customdata[1][1] == "left out of the verdict: one-off step: 1.4x the median"
    assert hm.customdata[0][0] == "used for the verdict"
    assert not [t for t in F.step_heatmap(step_table()).data if t.name == F.LEFT_OUT]


def test_step_heatmap_colour_scale_starts_at_zero():
    """10.4 and 10.7 ms steps must not read as the two ends of the scale."""
    rows = [{"rank": 0, "step": s, "step_ns": ns, **{p: 0 for p in PARTS}}
            for s, ns in ((1, 10_400_000), (2, 10_700_000))]
    hm = F.step_heatmap(pd.DataFrame(rows)).data[0]
    assert hm.zmin == 0 and hm.zmax == pytest.approx(10.7)
    waits = pd.DataFrame({"key": ["a", "b"], "rank": [0, 0], "wait_ns": [2e6, 3e6]})
    coll = pd.DataFrame({"key": ["a", "b"], "start_ns": [1, 2]})
    hm = F.wait_heatmap(waits, coll).data[0]
    assert hm.zmin == 0 and hm.zmax == pytest.approx(3.0)


def test_memcpy_and_memset_have_distinct_colours():
    def rgb(hex_colour):
        return [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]

    memcpy, memset = rgb(F.CLASS_COLORS["memcpy"]), rgb(F.CLASS_COLORS["memset"])
    assert sum(abs(a - b) for a, b in zip(memcpy, memset)) > 200  # not two greens


def test_kernel_bars_show_short_names_and_the_full_name_on_hover():
    full = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
            "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const"
            "::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
            "(int, at::native::GeluCUDAKernelImpl, std::array<char*, 2ul>)")
    kernels = pd.DataFrame({"name": [full], "cls": ["compute"], "count": [3], "total_ns": [1e6]})
    bar = F.kernel_bars(kernels).data[0]
    tick = F.kernel_bars(kernels).layout.yaxis.ticktext[0]
    assert "GeluCUDA" in tick and len(tick) <= 60 and "TensorIteratorBase" not in tick
    assert bar.customdata[0][2].replace("<br>", "") == full  # hover: every character


def test_rank_steps_bars_show_one_rank():
    fig = F.rank_steps_bars(step_table(), 1)
    assert list(fig.data[0].y) == pytest.approx([7.0, 8.0])
    assert "Rank 1" in fig.layout.title.text
    assert F.rank_steps_bars(step_table(), 9).layout.annotations[0].text.startswith("rank 9")


def test_kernel_bars_keep_kernels_with_equal_truncated_names_apart():
    long = "void at::native::unrolled_elementwise_kernel<" + "x" * 40
    kernels = pd.DataFrame({"name": [long + "A", long + "B", "gemm"], "cls": ["compute"] * 2 + ["communication"],
                            "count": [1, 2, 3], "total_ns": [1e6, 2e6, 3e6]})
    fig = F.kernel_bars(kernels)
    bar = fig.data[0]
    assert len(set(bar.y)) == 3
    assert list(bar.x) == pytest.approx([1.0, 2.0, 3.0])  # smallest first: the largest on top
    assert bar.marker.color[-1] == F.CLASS_COLORS["communication"]


def test_wait_heatmap_orders_collectives_by_start():
    coll = pd.DataFrame({"key": ["b", "a"], "start_ns": [2, 1]})
    waits = pd.DataFrame({"key": ["a", "b", "a", "b"], "rank": [0, 0, 1, 1],
                          "wait_ns": [1e6, 2e6, 0, 0]})
    hm = F.wait_heatmap(waits, coll).data[0]
    assert list(hm.customdata[0]) == ["a", "b"]
    assert list(hm.z[0]) == pytest.approx([1.0, 2.0])


def test_skew_scatter_one_trace_per_last_rank():
    coll = pd.DataFrame({"key": ["a", "b", "c"], "start_ns": [1_000, 2_000_000, 3_000_000],
                         "start_skew_ns": [5_000, 6_000, 7_000], "last_rank": [1, 1, 0]})
    fig = F.skew_scatter(coll, base_ns=1_000)
    assert sorted(t.name for t in fig.data) == ["last: rank 0", "last: rank 1"]
    r1 = next(t for t in fig.data if t.name == "last: rank 1")
    assert list(r1.x) == pytest.approx([0.0, 1.999]) and list(r1.y) == pytest.approx([5.0, 6.0])


def test_counters_figure_rows_per_metric_and_red_throttle_bands():
    counters = pd.DataFrame({"ts_ns": [0, 1_000_000, 0, 1_000_000], "device": 0, "rank": 0,
                             "metric": ["power_w", "power_w", "sm_clock_mhz", "sm_clock_mhz"],
                             "value": [100.0, 200.0, 1980.0, 1500.0]})
    steps = pd.DataFrame({"step": [1], "ts_ns": [0], "dur_ns": [500_000], "gpu_ts_ns": [0],
                          "gpu_end_ns": [600_000]})
    throttled = pd.DataFrame({"rank": [0], "t0_ns": [1_000_000], "t1_ns": [2_000_000]})
    fig = F.counters_figure(counters, ["sm_clock_mhz", "power_w", "absent"], steps, 0, throttled)
    assert [t.hovertemplate.split(":")[0] for t in fig.data] == ["rank 0 sm_clock_mhz", "rank 0 power_w"]
    red = [s for s in fig.layout.shapes if s.fillcolor == F.STRAGGLER_COLOR]
    assert red and red[0].x0 == pytest.approx(1.0)
    assert F.counters_figure(counters.iloc[:0], ["power_w"], steps, 0).layout.annotations[0].text \
        .startswith("no NVML")


def test_counter_step_labels_never_overlap():
    """Three 10 ms steps on a 300 ms axis of samples: one label names them; steps wide
    enough for their own labels keep them."""
    counters = pd.DataFrame({"ts_ns": [-230_000_000, 70_000_000], "device": 0, "rank": 0,
                             "metric": "power_w", "value": [120.0, 130.0]})
    steps = pd.DataFrame({"step": [2, 3, 4], "ts_ns": [0, 10_000_000, 20_000_000],
                          "dur_ns": 10_000_000, "gpu_ts_ns": 0, "gpu_end_ns": 0})
    labels = [a.text for a in F.counters_figure(counters, ["power_w"], steps, 0).layout.annotations
              if a.text.startswith("step")]
    assert labels == ["steps 2-4"]
    wide = counters.assign(ts_ns=[0, 30_000_000])
    labels = [a.text for a in F.counters_figure(wide, ["power_w"], steps, 0).layout.annotations
              if a.text.startswith("step")]
    assert labels == ["step 2", "step 3", "step 4"]


def test_diff_parts_bars_base_and_new_per_part_in_parts_order():
    parts = pd.DataFrame({"part": ["cpu_launch", "compute"], "base_ms": [1.0, 5.0],
                          "new_ms": [2.0, 4.0], "delta_ms": [1.0, -1.0]})
    fig = F.diff_parts_bars(parts)
    assert [t.name for t in fig.data] == ["base", "new"]
    assert list(fig.data[1].y) == ["compute", "launch overhead"]  # display names, horizontal
    assert list(fig.data[1].x) == [4.0, 2.0] and fig.data[1].orientation == "h"
    assert list(fig.data[1].marker.color) == [F.PART_COLORS["compute"], F.PART_COLORS["cpu_launch"]]


def test_a_chart_of_many_steps_labels_a_few_of_them():
    """Crowded step labels would be rotated by plotly (then the chart is drawn twice, to
    widen its margin): at most MAX_STEP_LABELS on the heatmap, twice that on a rank's steps,
    from the first step on; every step is still a bar or cell."""
    rows = [{"rank": 0, "step": s, "step_ns": 1e6, **{p: 0 for p in PARTS}} for s in range(40)]
    steps = pd.DataFrame(rows)
    heatmap = F.step_heatmap(steps)
    assert list(heatmap.layout.xaxis.tickvals) == [f"step {s}" for s in range(0, 40, 5)]
    assert len(heatmap.data[0].x) == 40
    bars = F.rank_steps_bars(steps, 0)
    assert list(bars.layout.xaxis.tickvals) == [f"step {s}" for s in range(0, 40, 3)]
    assert len(bars.data[0].x) == 40
    assert F.step_heatmap(step_table()).layout.xaxis.tickvals is None  # two steps: all shown
