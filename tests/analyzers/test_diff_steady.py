"""profkit diff on changes the fixed 1.25x rule and the batch rule got wrong: a steady change
beyond the steps' own spread (analyzers/compare/diff.py), microbatches of one global batch
taken for another batch, and activation recompute taken for more blocks
(analyzers/compare/workload.py, comparable.py, analyzers/measure/signature.py). Real pairs
labelled by the workloads' own CUDA-event step times (samples/runs/*/SUMMARY.txt)."""

import gzip
import json

import numpy as np
import pytest
from profkit.analyzers.compare.diff import diff_analyses, step_verdict
from profkit.analyzers.thresholds import DEFAULT

from tests.analysed import analysed
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"


@pytest.mark.parametrize("base, new, verdict, sure", [
    ([100, 101, 99], [82, 81, 83], "improved", "likely"),        # -18%, each side within 2.4%
    ([100, 101, 99], [118, 119, 117], "regressed", "likely"),
    ([100, 110, 92], [90, 95, 85], "unchanged", ""),             # -9%, but 18% spread, overlap
    ([100, 101, 99], [99.5, 100.5, 98.5], "unchanged", ""),      # within the 2% floor
    ([259.6, 259.4], [240.7], "improved", "tentative"),          # -7.3%, base within 0.1%
    ([100], [93], "unchanged", ""),                              # no spread on either side
])
def test_a_steady_change_beyond_the_steps_spread_is_called(base, new, verdict, sure):
    v = step_verdict(np.array(base) * 1e6, np.array(new) * 1e6, DEFAULT)
    assert v["verdict"] == verdict and not v["tested"]
    assert sure in v["summary"]
    if len(base) > 1:  # (max - min) / median of the noisier side
        spreads = [(max(s) - min(s)) / np.median(s) for s in (base, new) if len(s) > 1]
        assert v["spread_frac"] == pytest.approx(max(spreads))


def _labels(folder: str, name: str) -> dict:
    for line in (RUNS / folder / "SUMMARY.txt").read_text().splitlines():
        if line.startswith(name + " PROFKIT_SAMPLE "):
            return json.loads(line.split(" PROFKIT_SAMPLE ", 1)[1])
    raise KeyError(name)


def test_more_microbatches_of_one_global_batch_are_judged_per_step():
    """GPipe 4 -> 16 microbatches, global batch 64 on both: the profiled step 3 takes
    259.6 -> 240.7 ms on the first stage (labels), -7.3%; not '+199% per sample'."""
    d = diff_analyses(analysed(RUNS / "parallel" / "pipeline_m4"),
                      analysed(RUNS / "parallel" / "pipeline_m16"))
    v = d.verdict
    was, now = (_labels("parallel", n)["step_ms_per_rank"][0][3]
                for n in ("pipeline_m4", "pipeline_m16"))
    assert v["verdict"] == "improved" and v["basis"] == "step" and v["reasons"] == []
    assert v["change_frac"] == pytest.approx(now / was - 1, abs=0.01)
    assert v["evidence"]["microbatches"]["microbatches"] == [4, 16]
    assert v["evidence"]["microbatches"]["global_batch"] == \
        _labels("parallel", "pipeline_m4")["global_batch"] == 64
    assert "microbatches 4 -> 16 per step, the same global batch" in v["headline"]
    assert "per sample" not in v["headline"]
    assert not any("annotations" in c for c in v["changes"])  # the library's Forward i ranges


def _recomputed_per_step(path) -> float:
    """Layer calls (outermost aten::linear / aten::layer_norm) that start inside an
    autograd::engine::evaluate_function range of their thread, per profiled step."""
    with gzip.open(next((path / "traces").glob("*.json.gz")), "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")
             and e.get("cat") == "user_annotation"]
    backward = [e for e in ev if e["name"].startswith("autograd::engine::evaluate_function")]
    layers = [e for e in ev if e["name"] in ("aten::linear", "aten::layer_norm")
              and e.get("cat") == "cpu_op"]
    count = 0
    for e in layers:
        nested = any(o is not e and o["name"] == e["name"] and o["tid"] == e["tid"]
                     and o["ts"] <= e["ts"] < o["ts"] + o["dur"] and o["dur"] > e["dur"]
                     for o in layers)
        inside = any(b["tid"] == e["tid"] and b["ts"] <= e["ts"] < b["ts"] + b["dur"]
                     for b in backward)
        count += inside and not nested
    return count / len(steps)


def test_checkpointing_off_is_the_same_model_and_a_steady_gain():
    """ckpt_on -> ckpt_off: the recomputed forward is not 8 vs 4 blocks; 33.5 -> 21.5 ms per
    profiled step (labels, steps 2-4), -36%."""
    d = diff_analyses(analysed(RUNS / "memory" / "ckpt_on"),
                      analysed(RUNS / "memory" / "ckpt_off"))
    v = d.verdict
    assert v["verdict"] == "improved" and v["reasons"] == []
    was, now = (np.median(_labels("memory", n)["step_ms"][2:5])
                for n in ("memory_ckpt_on", "memory_ckpt_off"))
    assert v["change_frac"] == pytest.approx(now / was - 1, abs=0.03)
    per_step = _recomputed_per_step(RUNS / "memory" / "ckpt_on")
    assert per_step == 24  # 4 blocks: 4 linears and 2 layer norms each, run again
    assert v["evidence"]["recomputed"] == [per_step, 0]
    assert any(c.startswith("recompute removed: 24 -> 0 layer calls") for c in v["changes"])


def test_a_schedule_change_is_the_same_work_and_named():
    """GPipe -> 1F1B at 4 stages x 4 microbatches: the same bubble in theory (43%) and the
    same step (labels: 259.6 -> 259.5 ms, the profiled step 3 of each)."""
    new = REPO / "tests" / "data" / "pipeline_m4_1f1b"
    d = diff_analyses(analysed(RUNS / "parallel" / "pipeline_m4"), analysed(new))
    v = d.verdict
    label = json.loads((new / "LABEL.txt").read_text().split(" PROFKIT_SAMPLE ", 1)[1])
    was = _labels("parallel", "pipeline_m4")["step_ms_per_rank"][0][3]
    assert v["verdict"] == "unchanged" and v["reasons"] == [] and v["basis"] == "step"
    assert v["change_frac"] == pytest.approx(label["step_ms_per_rank"][0][3] / was - 1, abs=0.01)
    assert "pipeline schedule GPipe -> 1F1B" in v["changes"]
    assert any(c.startswith("pipeline bubble ") and "(theory 43% -> 43%)" in c
               for c in v["changes"])
