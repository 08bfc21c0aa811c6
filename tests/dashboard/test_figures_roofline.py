"""The roofline figure on a small hand-made ``roofline`` table: log-log axes, both roofs,
one point per known kernel sized by its time, coloured by its class."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.roofline import ROOFLINE_COLUMNS
from profkit.dashboard.figures.roofline import BOUND_COLORS, roofline_figure


def row(kernel, bound, ms, tflops, gbps, peak_tflops=66.9, flops=None):
    seconds = ms * 1e-3
    nbytes = gbps * 1e9 * seconds
    flops = tflops * 1e12 * seconds if flops is None else flops
    return {"rank": 0, "kernel": kernel, "short_name": kernel, "op": f"aten::{kernel}",
            "calls_per_step": 1.0, "kernel_ms_per_step": ms, "flops_per_step": flops,
            "bytes_per_step": nbytes, "achieved_tflops": tflops, "achieved_gbps": gbps,
            "peak_tflops": peak_tflops, "peak_gbps": 3350.0,
            "intensity_flop_per_byte": flops / nbytes if nbytes else np.nan, "bound": bound}


def table():
    return pd.DataFrame([
        row("gemm_bf16", "math", 4.0, 700.0, 900.0, peak_tflops=989.4),
        row("gelu", "memory", 1.0, 6.0, 3000.0),
        row("copy", "memory", 0.25, 0.0, 2800.0, flops=0.0),  # no FLOPs: left off the axes
        row("fill", "latency", 0.001, 1e-6, 0.004),
        {**row("custom", "unknown", 2.0, np.nan, np.nan), "bytes_per_step": np.nan},
    ], columns=list(ROOFLINE_COLUMNS))


def test_log_log_axes_both_roofs_and_points_by_class():
    fig = roofline_figure(table())
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    roofs = [t for t in fig.data if t.mode == "lines"]
    # one memory roof (one HBM bandwidth), one flat roof per peak: fp32 vector, bf16 tensor
    assert len(roofs) == 3
    slope = [t for t in roofs if len(set(t.y)) > 2]
    assert len(slope) == 1
    x, y = np.asarray(slope[0].x), np.asarray(slope[0].y)
    assert y == pytest.approx(x * 3.35)  # 3350 GB/s x intensity
    flats = sorted(float(t.y[0]) for t in roofs if len(set(t.y)) == 1)
    assert flats == [pytest.approx(66.9), pytest.approx(989.4)]
    points = {t.name: t for t in fig.data if t.mode == "markers"}
    assert set(points) == {"math", "memory", "latency"}
    assert all(points[b].marker.color == BOUND_COLORS[b] for b in points)
    assert "left out" in fig.layout.title.text  # the unknown kernel


def test_marker_area_follows_time_and_zero_flops_are_left_off():
    fig = roofline_figure(table())
    memory = next(t for t in fig.data if t.name == "memory")
    assert len(memory.x) == 1  # gelu; the copy has no FLOPs: no place on a FLOP axis
    assert "1 without FLOPs (copies, fills: 0.25 ms/step)" in fig.layout.title.text
    sizes = {t.name: np.asarray(t.marker.size) for t in fig.data if t.mode == "markers"}
    assert sizes["math"][0] / sizes["memory"][0] == pytest.approx(2.0)  # 4 ms vs 1 ms: area x4


def test_empty_and_unknown_tables_say_why():
    assert "no kernels" in roofline_figure(pd.DataFrame()).layout.annotations[0].text
    unknown = table()[table()["bound"] == "unknown"]
    assert "record_shapes" in roofline_figure(unknown).layout.annotations[0].text
