"""Inference phases on real traces: our HF generate captures on an H200 (labels from a
CUDA-synced timer around each token, samples/infer_hf.py) and the SGLang / vLLM traces
TraceLens publishes (tests/data/public)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure import inference as I
from profkit.analyzers.measure import phases as P

from profkit.run.loader import load_run
from tests.realruns import RUNS, read_doc, sample_labels

INFER = RUNS / "inference"
LABELS = sample_labels(INFER / "SUMMARY.txt")
CASES = sorted(LABELS)
PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public"


def profiled_step(run_dir: Path) -> int:
    """The ProfilerStep#N the trace holds, read from the raw JSON (not from profkit)."""
    doc = read_doc(next((run_dir / "traces").glob("*.json.gz")))
    names = {e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith(
        "ProfilerStep#")}
    assert len(names) == 1, names
    return int(re.match(r"ProfilerStep#(\d+)", names.pop()).group(1))


@pytest.fixture(scope="module")
def analyses():
    return {c: analyze(load_run(INFER / c)) for c in CASES}


def test_every_capture_is_labelled():
    assert CASES == ["hf_b16", "hf_eager", "hf_prompt2048", "hf_static_compiled",
                     "kv_eager_b8", "kv_graph_b64", "kv_graph_b8", "kv_graph_big_b8"]


@pytest.mark.parametrize("case", CASES)
def test_ttft_and_tpot_within_ten_percent_of_the_timer(analyses, case):
    label = LABELS[case]["per_step"][profiled_step(INFER / case)]
    phases = analyses[case].table("inference_phases").set_index("phase")
    prefill, decode = phases.loc["prefill"], phases.loc["decode"]
    assert prefill["ttft_ms"] == pytest.approx(label["ttft_ms"], rel=0.10)
    assert decode["tpot_ms"] == pytest.approx(label["tpot_ms"], rel=0.10)
    assert decode["time_ms"] == pytest.approx(label["decode_ms"], rel=0.10)
    # the timer's marks: the prefill's token, then one per decode forward
    assert prefill["forwards_per_step"] == 1
    assert decode["forwards_per_step"] == label["tokens"] - 1
    assert decode["batch"] == LABELS[case]["batch"]


def test_the_phases_are_found_from_shapes_eager_and_from_regions_compiled(analyses):
    assert set(analyses["hf_eager"].table("inference_phases")["source"]) == {"embedding shapes"}
    assert set(analyses["hf_static_compiled"].table("inference_phases")["source"]) == \
        {"compiled regions"}


def test_prefill_grows_with_the_prompt_and_decode_tokens_per_second_with_the_batch(analyses):
    def row(case, phase):
        t = analyses[case].table("inference_phases")
        return t[t["phase"] == phase].iloc[0]

    # prompt 512 -> 2048: the timer's TTFT 34.8 -> 73.2 ms; decode batch 8 -> 16: 2.2x tokens/s
    assert row("hf_prompt2048", "prefill")["ttft_ms"] > 1.8 * row("hf_eager", "prefill")["ttft_ms"]
    assert row("hf_prompt2048", "prefill")["tokens_per_forward"] == 8 * 2048
    assert row("hf_b16", "decode")["tokens_per_s"] > 1.8 * row("hf_eager", "decode")["tokens_per_s"]


def test_graph_replayed_decode_forwards_are_found():
    run = load_run(INFER / "kv_graph_b8")
    fw = I.rank_inference(run.ranks[0], None, run.meta)["forwards"]
    assert (fw["phase"] == "decode").sum() == 32 and (fw["phase"] == "prefill").sum() == 1


def _label_tokens_per_s(case):
    label = LABELS[case]["per_step"][profiled_step(INFER / case)]
    return LABELS[case]["batch"] / label["tpot_ms"] * 1e3


def test_small_batch_graph_decode_gets_the_batching_advice_and_batching_pays(analyses):
    def batch_findings(case):
        return [f for f in analyses[case].findings if f.category == "decode_batch"]

    found = batch_findings("kv_graph_b8")
    assert len(found) == 1 and "larger batch" in found[0].recommendation
    # the weights alone (8 blocks of 12 x 1024^2 bf16 and the 32000 x 1024 head, tied) and
    # K, V of the 512-token prompt (8 blocks x 2 x 8 x 512 x 1024 bf16)
    weights = 8 * 12 * 1024 ** 2 * 2 + 32000 * 1024 * 2
    kv = 8 * 2 * 8 * 512 * 1024 * 2
    assert found[0].evidence["weight_bytes_per_token"] == pytest.approx(weights, rel=0.01)
    assert found[0].evidence["kv_bytes_per_token"] == pytest.approx(kv, rel=0.01)
    # the measured fix: batch 64 serves several times the tokens per second (timer labels)
    assert _label_tokens_per_s("kv_graph_b64") > 4 * _label_tokens_per_s("kv_graph_b8")
    # at batch 64 the KV cache outweighs the weights; eager decode is host bound: no advice
    assert not batch_findings("kv_graph_b64") and not batch_findings("kv_eager_b8")


def test_cuda_graph_decode_is_the_measured_fix_of_the_host_bound_decode(analyses):
    launch = [f for f in analyses["kv_eager_b8"].findings if f.category == "cpu_launch"][0]
    assert "CUDA graph" in launch.recommendation
    step = LABELS["kv_eager_b8"]["step_ms"][profiled_step(INFER / "kv_eager_b8")]
    fixed = LABELS["kv_graph_b8"]["step_ms"][profiled_step(INFER / "kv_graph_b8")]
    # the saving the finding promises is within 0.15 of the step fraction the fix saved
    assert launch.estimated_saving["fraction"] == pytest.approx(1 - fixed / step, abs=0.15)


def test_host_bound_decode_gets_the_decode_advice_once(analyses):
    a = analyses["hf_eager"]
    launch = [f for f in a.findings if f.category == "cpu_launch"]
    assert len(launch) == 1
    f = launch[0]
    assert "By phase:" in f.message and "CUDA graph" in f.recommendation
    assert "cache_implementation=\"static\"" in f.recommendation
    # the saving is the part's, not a second one for decode
    assert not [g for g in a.findings if g.category.startswith("decode")]
    compiled = [f for f in analyses["hf_static_compiled"].findings if f.category == "cpu_launch"]
    assert "compiled already" in compiled[0].recommendation


def test_the_diff_of_eager_and_compiled_is_in_decode(analyses):
    eager = analyses["hf_eager"].table("inference_phases").set_index("phase")
    compiled = analyses["hf_static_compiled"].table("inference_phases").set_index("phase")
    label_e = LABELS["hf_eager"]["per_step"][profiled_step(INFER / "hf_eager")]
    label_c = LABELS["hf_static_compiled"]["per_step"][profiled_step(INFER / "hf_static_compiled")]
    measured = compiled.loc["decode", "tpot_ms"] / eager.loc["decode", "tpot_ms"] - 1
    truth = label_c["tpot_ms"] / label_e["tpot_ms"] - 1
    assert measured == pytest.approx(truth, abs=0.05)


def _public(name):
    run = load_run(PUBLIC / name)
    return I.rank_inference(run.ranks[min(run.ranks)], None, run.meta)


def test_vllm_decode_replay_is_one_decode_forward_of_32_sequences():
    v = _public("vllm_decode_replay")
    rows = v["phases"]
    assert list(rows["phase"]) == ["decode"] and rows["batch"].iat[0] == 32
    # the window the breakdown reads: 10.74 ms GPU span (docs/public-traces.md), busy ~100%
    assert rows["time_ms"].iat[0] == pytest.approx(10.7, abs=0.1)
    assert rows["gpu_busy"].iat[0] > 0.95


def test_vllm_piecewise_replay_is_a_mixed_batch():
    rows = _public("vllm_piecewise_replay")["phases"]
    # execute_8192_context_9(...)_generation_37(...): 9 prompts and 37 decodes in one forward
    assert list(rows["phase"]) == ["mixed"] and rows["batch"].iat[0] == 46
    assert rows["tokens_per_forward"].iat[0] == 8192


def test_engine_annotations_parse():
    ann = ("execute_15360_context_15(sq15360sk15360sqsq15728640sqsk15728640)_generation_0"
           "(sq0sk0sqsq0sqsk0)")
    m = P.EXECUTE_RE.match(ann)
    assert m and m.groups() == ("15360", "15", "0")
    m = P.SGLANG_RE.match("step[EXTEND bs=15 toks=15360]")
    assert m and m.groups() == ("EXTEND", "15", "15360")


def test_training_has_no_phases():
    run = load_run(RUNS / "memory" / "gpt_b32")
    assert all(I.rank_inference(d, None, run.meta) is None for d in run.ranks.values())
    assert analyze(run).table("inference_phases").empty


def test_token_counts_label_the_phases_per_step():
    import pandas as pd

    fw = pd.DataFrame({"start_ns": [0, 1, 2, 3, 4], "end_ns": [1, 2, 3, 4, 5],
                       "tokens": [4096.0, 8, 8, 8, 512], "batch": np.nan, "phase": "",
                       "source": "compiled regions"})
    out = P.label_by_tokens(fw, np.array([0, 0, 0, 0, 1]))
    # step 0: 4096 tokens then three of 8 (decode); step 1 has one forward: unknown
    assert list(out["phase"]) == ["prefill", "decode", "decode", "decode", ""]


def test_diff_attributes_the_change_by_phase(analyses):
    from profkit.analyzers.compare.diff import diff_analyses
    from profkit.analyzers.report.diff_text import diff_to_text

    d = diff_analyses(analyses["hf_eager"], analyses["hf_static_compiled"])
    ph = d.verdict["phases"]["phases"]
    label_e = LABELS["hf_eager"]["per_step"][profiled_step(INFER / "hf_eager")]
    label_c = LABELS["hf_static_compiled"]["per_step"][profiled_step(INFER / "hf_static_compiled")]
    assert ph["decode"]["change_frac"] == pytest.approx(
        label_c["tpot_ms"] / label_e["tpot_ms"] - 1, abs=0.03)
    assert ph["prefill"]["change_frac"] == pytest.approx(
        label_c["ttft_ms"] / label_e["ttft_ms"] - 1, abs=0.05)
    text = diff_to_text(d)
    assert "INFERENCE: " in text and "of the step's change is in decode" in text


def test_a_phase_within_three_percent_reads_unchanged():
    import pandas as pd
    from profkit.analyzers.compare.phases import phase_change

    def side(ttft, tpot):
        return pd.DataFrame([
            {"rank": 0, "phase": "prefill", "ttft_ms": ttft, "tpot_ms": np.nan,
             "forward_ms": ttft, "time_ms": ttft},
            {"rank": 0, "phase": "decode", "ttft_ms": np.nan, "tpot_ms": tpot,
             "forward_ms": tpot, "time_ms": 15 * tpot}])

    change = phase_change(side(30.0, 20.0), side(30.5, 10.0))
    assert change["text"].startswith("prefill unchanged time to first token (30 -> 30.5 ms)")
    assert "decode -50.0% per token (20 -> 10 ms)" in change["text"]
    # 150 ms of the step's 149.5 ms change is decode's: the share can pass 100%
    assert change["phases"]["decode"]["change_frac"] == pytest.approx(-0.5)
    assert phase_change(side(30.0, 20.0), side(30.0, 20.0).iloc[:0]) is None


def test_sglang_prefill_is_one_prefill_of_15_prompts():
    rows = _public("sglang_prefill")["phases"]
    # execute_15360_context_15(...)_generation_0(...): 15 prompts, 15,360 tokens, no decode
    assert list(rows["phase"]) == ["prefill"]
    assert rows["batch"].iat[0] == 15 and rows["tokens_per_forward"].iat[0] == 15360
    assert np.isnan(rows["ttft_ms"].iat[0])  # an engine step has no request's arrival


def _phase_row(**over):
    import pandas as pd

    row = {"rank": 0, "phase": "prefill", "gpu_busy": 0.9, "mfu": 0.08, "share": 0.5,
           "time_ms": 40.0, "peak_tflops": 989.0, "hbm_util": np.nan, "batch": 8.0,
           "bytes_coverage": 0.9, "bytes_source": "ops", "weight_bytes_per_token": 0.0,
           "bytes_per_token": 0.0, "kv_bytes_per_token": 0.0, "tpot_ms": np.nan,
           "tokens_per_s": 1000.0, "roof_ms_per_token": np.nan, "hbm_tbps": 4.8,
           "device_model": "H200"}
    row.update(over)
    return pd.DataFrame([row])


@pytest.mark.parametrize("over, fires", [
    ({}, True),  # GPU busy 90%, 8% MFU over half the step
    ({"gpu_busy": 0.3}, False),  # the host bounds it: the part findings speak
    ({"mfu": 0.45}, False),  # near enough the roof
    ({"share": 0.05}, False),  # too small a share of the step to matter
])
def test_prefill_far_below_the_math_roof(over, fires):
    from profkit.analyzers.findings.inference import inference_findings
    from profkit.analyzers.result import Result
    from profkit.analyzers.thresholds import DEFAULT

    found = inference_findings(Result(tables={"inference_phases": _phase_row(**over)}), DEFAULT)
    assert [f.category for f in found] == (["prefill_roof"] if fires else [])
