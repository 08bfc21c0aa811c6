"""The roofline of real runs (samples/runs/memory/gpt_b32, an H200 GPT step): each roof
drawn once and labelled, and the copy kernels (no FLOPs) kept off the FLOP axis. The
expected roofs and copies are read from the run's ``roofline`` table by hand (rounded to
0.1 TFLOP/s, the device table's precision), not by the figure's code."""

import numpy as np
import pytest
from profkit.dashboard.figures.roofline import roofline_figure

from tests.analysed import analysed
from tests.conftest import REPO

GPT = REPO / "samples" / "runs" / "memory" / "gpt_b32"


@pytest.fixture(scope="module")
def roofline():
    return analysed(GPT).table("roofline")


def test_each_roof_once_with_its_label(roofline):
    fig = roofline_figure(roofline)
    peaks = sorted(set(np.round(roofline["peak_tflops"].dropna(), 1)))
    assert peaks == [66.9, 989.4]  # H200: fp32 vector, bf16 dense tensor (devices.py)
    lines = [t for t in fig.data if t.mode == "lines"]
    flats = sorted(round(float(t.y[0]), 1) for t in lines if len(set(t.y)) == 1)
    assert flats == peaks  # before: four lines, 989.4 and 989.3999999999999 twice
    assert len(lines) == len(peaks) + 1  # and one memory roof: 4800 GB/s
    labels = {a.text for a in fig.layout.annotations}
    assert {"66.9 TFLOP/s", "989.4 TFLOP/s", "HBM 4800 GB/s"} <= labels


def test_copies_without_flops_stay_off_the_flop_axis(roofline):
    fig = roofline_figure(roofline)
    drawn = roofline[roofline["bound"].isin(["math", "memory", "latency"])]
    copies = drawn[drawn["flops_per_step"] <= 0]
    assert len(copies) >= 5  # direct_copy, bfloat16_copy, CatArrayBatchedCopy, gather, ...
    xs = np.concatenate([np.asarray(t.x, float) for t in fig.data if t.mode == "markers"])
    smallest = drawn.loc[drawn["flops_per_step"] > 0, "intensity_flop_per_byte"].min()
    assert xs.min() == pytest.approx(smallest)  # nothing on a floor under the real kernels
    lo, hi = fig.layout.xaxis.range
    assert hi - lo < 8  # decades; before: copies at 1/100 of the smallest, 10 decades
    assert f"{len(copies)} without FLOPs" in fig.layout.title.text
