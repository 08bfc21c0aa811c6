"""In headless chromium, on the session's dashboard server: an HF ``generate`` capture on an
H200 (samples/runs/inference) gets an inference section on its Overview, the values the text
report prints, near the CUDA-synced timer's labels; its timeline shades prefill and decode;
a training run gets neither; Compare gives the change by phase.

Expected strings are made here from the analysis table with the units module (not from the
tile's code), checked against the report's own inference line and the workload's labels."""

import pytest
from profkit.analyzers import units as U
from profkit.analyzers.parts import PARTS, part_label
from profkit.analyzers.report.inference_sections import inference_line

from tests.analysed import analysed
from tests.dashboard.test_timeline_browser import KEYS, open_timeline
from tests.realruns import RUNS, sample_labels

EAGER, COMPILED, TRAINING = "inference/hf_eager", "inference/hf_static_compiled", "profkit_ddp"
pytestmark = pytest.mark.skipif(any(k not in KEYS for k in (EAGER, COMPILED, TRAINING)),
                                reason="the sample runs are absent")
LABELS = sample_labels(RUNS / "inference" / "SUMMARY.txt")
PROFILED_STEP = 2  # the ProfilerStep# each capture holds (tests/analyzers/test_inference.py)


def phase_rows(label: str) -> dict:
    table = analysed(RUNS / label).table("inference_phases")
    return {r["phase"]: r for r in table.to_dict("records")}


def tile_values(page) -> dict[str, str]:
    """stat label -> its value, as the page shows them."""
    tile = page.locator("#inf-tile")
    tile.wait_for()
    stats = tile.locator(".stat")
    return {stats.nth(i).locator(".stat-label").inner_text().lower():
            stats.nth(i).locator(".stat-value").inner_text() for i in range(stats.count())}


def test_the_overview_of_a_generate_run_shows_the_reports_ttft_and_tpot(page):
    page.goto(f"{page.base}/run/{KEYS[EAGER]}")
    shown = tile_values(page)
    rows = phase_rows(EAGER)
    prefill, decode = rows["prefill"], rows["decode"]
    ttft, tpot = U.ms(prefill["ttft_ms"]), U.ms(decode["tpot_ms"])
    spread = f"p10-p90 {decode['tpot_p10_ms']:.3g}-{decode['tpot_p90_ms']:.3g} ms"
    assert shown["time to first token"] == ttft == "35.3 ms"
    assert shown["time per output token"] == tpot == "26.7 ms"
    assert spread in page.locator("#inf-tile").inner_text()
    # the text report's line says the same figures
    line = inference_line(analysed(RUNS / EAGER))
    assert f"prefill {ttft} (time to first token)" in line and f"at {tpot} each ({spread})" in line
    tokens = U.number(round(decode["tokens_per_s"]))
    assert shown["tokens/s"] == tokens and f"{tokens} tokens/s" in line
    assert shown["batch"] == str(LABELS["hf_eager"]["batch"]) == "8"
    assert shown["decode gpu busy"] == U.pct(decode["gpu_busy"])
    # what holds decode: the part with the most of its time (launch overhead, the finding's)
    top = max(PARTS, key=lambda p: decode[f"{p}_ms"])
    share = U.pct(decode[f"{top}_ms"] / decode["time_ms"])
    assert top == "cpu_launch" and f"mostly {part_label(top)} {share}" in \
        page.locator("#inf-tile").inner_text()
    assert shown["decode hbm use"] == U.pct(decode["hbm_util"])  # all bytes costed: no '>='
    assert decode["bytes_coverage"] > 0.5 and shown["prefill mfu"] == U.pct(prefill["mfu"])
    # and near the timer's labels (the profiled step's), as the analysis tests demand
    label = LABELS["hf_eager"]["per_step"][PROFILED_STEP]
    assert float(shown["time to first token"].split()[0]) == pytest.approx(label["ttft_ms"],
                                                                         rel=0.10)
    assert float(shown["time per output token"].split()[0]) == pytest.approx(label["tpot_ms"],
                                                                           rel=0.10)


def test_a_run_without_phases_has_no_inference_section(page):
    page.goto(f"{page.base}/run/{KEYS[TRAINING]}")
    page.locator("#m-tile").wait_for()  # the column the section would be in is drawn
    assert analysed(RUNS / TRAINING).table("inference_phases").empty
    assert page.locator("#inf-tile").count() == 0
    assert "inference phase" not in page.content()


def test_the_timeline_of_a_generate_run_shades_prefill_then_decode(page):
    fig = open_timeline(page, EAGER)
    bands = [s for s in fig["shapes"] if s.get("name", "").startswith(("prefill", "decode"))]
    assert [b["name"] for b in bands] == ["prefill · step 2 · rank 0",
                                          "decode (15 forwards) · step 2 · rank 0"]
    prefill, decode = bands
    step = next(s for s in fig["shapes"] if s.get("name") == "step 2 · rank 0")
    rows = phase_rows(EAGER)
    # prefill from the step's start to the first token; decode from there, its time per step
    assert prefill["x0"] == pytest.approx(step["x0"], abs=1e-6)
    assert prefill["x1"] - prefill["x0"] == pytest.approx(rows["prefill"]["ttft_ms"], rel=1e-9)
    assert decode["x0"] == pytest.approx(prefill["x1"], abs=1e-9)
    assert decode["x1"] - decode["x0"] == pytest.approx(rows["decode"]["time_ms"], rel=1e-6)
    label = LABELS["hf_eager"]["per_step"][PROFILED_STEP]
    assert decode["x1"] - decode["x0"] == pytest.approx(label["decode_ms"], rel=0.10)
    assert prefill["fillcolor"] != decode["fillcolor"] and prefill["layer"] == "below"
    assert prefill["opacity"] < 0.5
    legend = page.locator(".chips").first.inner_text()
    assert "prefill (inference phase)" in legend and "decode (inference phase)" in legend


def test_the_timeline_of_a_training_run_has_no_phase_bands(page):
    fig = open_timeline(page, TRAINING)
    assert fig["shapes"]  # its step bands
    assert not [s for s in fig["shapes"] if s.get("name", "").startswith(("prefill", "decode"))]
    assert "inference phase" not in page.locator(".chips").first.inner_text()


def test_compare_gives_the_change_by_phase(page):
    page.goto(f"{page.base}/compare?base={KEYS[EAGER]}&new={KEYS[COMPILED]}")
    line = page.locator(".diff-phases")
    line.wait_for()
    base, new = phase_rows(EAGER)["decode"], phase_rows(COMPILED)["decode"]
    change = new["tpot_ms"] / base["tpot_ms"] - 1
    assert f"decode {change:+.1%} per token" in line.inner_text()
    timer = [LABELS[c]["per_step"][PROFILED_STEP]["tpot_ms"] for c in ("hf_eager",
                                                                      "hf_static_compiled")]
    assert change == pytest.approx(timer[1] / timer[0] - 1, abs=0.02)  # the timer's -44.6%
