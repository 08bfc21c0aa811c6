"""Attention written by hand (issue 40, item 7): advise scaled_dot_product_attention with the
saving of a fused kernel at its achievable rate, checked against the measured swap.

samples/runs/issue40 (1 x H200, README there): the same 2-layer bf16 attention block (batch 8,
2048 tokens, 16 heads of 64), forward and backward, ``attention_manual`` written by hand
(matmul, causal mask, softmax, matmul) and ``attention_flash_h200`` through SDPA's
FlashAttention. Their own CUDA-event times of the recorded steps (SUMMARY.txt) are the
measured fix.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import sample_labels

ISSUE = REPO / "samples" / "runs" / "issue40"


def profiled_ms(run: str) -> float:
    """Median CUDA-event time of the recorded steps (run.json's schedule)."""
    schedule = json.loads((ISSUE / run / "run.json").read_text())["profiler"]
    first = schedule.get("wait", 1) + schedule.get("warmup", 1)
    times = sample_labels(ISSUE / "SUMMARY.txt")[run]["step_ms"][first:first + schedule["active"]]
    return float(np.median(times))


def score_shapes(run: str) -> set[tuple]:
    """Shapes of the softmax inputs in the raw trace."""
    trace = next((ISSUE / run / "traces").iterdir())
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    return {tuple(e["args"]["Input Dims"][0]) for e in doc["traceEvents"]
            if e.get("cat") == "cpu_op" and e["name"] == "aten::_softmax"}


def test_hand_written_attention_gets_sdpa_advice_with_the_measured_saving():
    assert score_shapes("attention_manual") == {(8, 16, 2048, 2048)}  # B, H, T, T
    a = analysed(ISSUE / "attention_manual")
    (f,) = [f for f in a.findings if f.category == "attention"]
    assert "scaled_dot_product_attention" in f.recommendation
    assert f.evidence["heads_x_batch"] == 8 * 16 and f.evidence["seq"] == 2048
    assert f.evidence["head_dim"] == 64
    # 4 B H T^2 d per forward, x3.5 with the backward, per layer (2 layers)
    assert f.evidence["attention_flops"] == pytest.approx(4 * 128 * 2048**2 * 64 * 3.5 * 2)
    # one bf16 T x T score matrix kept per layer for the backward
    assert f.evidence["score_bytes"] == 128 * 2048**2 * 2 * 2
    before, after = profiled_ms("attention_manual"), profiled_ms("attention_flash_h200")
    measured = 1 - after / before  # 21.96 -> 6.62 ms per profiled step: 70%
    assert f.estimated_saving["fraction"] == pytest.approx(measured, abs=0.15)
    assert f.estimated_saving["ms_per_step"] <= f.evidence["attention_ns"] / 1e6


def test_no_attention_advice_where_sdpa_already_runs():
    for run in (ISSUE / "attention_flash_h200", REPO / "samples" / "runs" / "why" / "attention_math"):
        a = analysed(run)
        assert not [f for f in a.findings if f.category == "attention"]
    assert not [f for f in analysed(ISSUE / "precision_fp16").findings
                if f.category == "attention"]  # an MLP: no square scores
