"""profkit diff on real before/after pairs, against the workloads' own measurements.

Each row names a pair captured back to back on one GPU and the answer its own numbers give
(SUMMARY.txt: CUDA events at every step boundary, the batch, the layer count; run.json: which
steps the profiler recorded), written from those numbers, not from profkit's output. For each
pair the test checks the verdict, that profkit's change is the measured one (the profiled
steps' median, per sample when the batch changed; inside the interval when there is one),
that a "not comparable" says why, what kind of change profkit names, and that no pair of the
same GPU and world size gets a warning.

samples/runs/why (1 x H100, README there):

- eltwise_chain -> _fixed: eager -> torch.compile, 3.379 -> 0.472 ms (7.2x); ncu counts 16
  eager kernels, one Triton kernel compiled: improved, kernels fused 16 -> 1.
- precision -> _fixed: fp32 (TF32 off) -> bf16 autocast, 43.64 -> 3.93 ms: improved; ncu
  shows sm80_xmma/cutlass fp32 GEMMs before, nvjet bf16 after.
- attention_math -> attention_flash: SDPA math -> flash, 47.52 -> 3.88 ms: improved.
- gpt_b8 -> gpt_b32: batch 8 -> 32 (x 512 tokens), 21.80 -> 19.04 ms per profiled step, so
  2.725 -> 0.595 ms per sample (-78%; the clean steps say -55%): improved per sample, while
  per step it is 4x the work.
- kv_nocache -> kv_cache: 6.11 -> 0.52 TFLOP per step (FlopCounterMode), but both launch-bound
  under the profiler: the profiled steps (51.0, 48.0, 42.8 vs 40.4, 45.6, 48.1 ms) overlap
  and move -5%: unchanged (the traces cannot show the -21% of the clean steps), with the
  FLOP drop named.
- gpt_4l -> gpt_6l: 4 layers at 8 x 512 vs 6 layers at 16 x 256: another model, not
  comparable ("4 vs 6 blocks").
- cpu_optimizer -> _fixed (CPU Adam -> fused GPU Adam, 69.75 -> 4.41 ms), preprocess ->
  _fixed (12 DataLoader workers, 65.07 -> 6.61 ms), graph_hooks -> _fixed (14.34 -> 4.52 ms),
  recompile -> _fixed (7 recompiles -> none, 2685 -> 10.2 ms): improved.

samples/runs/pairs (1 x H200; README there) and the zoo's straggler/balanced pair keep the
answers they had: same workload twice unchanged, launch_sync unchanged (-6%, under the 1.25x
a 3-step side needs), the rest improved. parallel/tp_sp -> tp_async (2 x H200): async TP
named; unchanged, as the profiled steps were (+9%; the steps after the profiler: -5.3%).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from profkit.analyzers.compare.diff import NOT_COMPARABLE, diff_analyses, slower_than
from profkit.analyzers.report.diff_text import diff_to_json, diff_to_text, shown

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import sample_labels

RUNS = REPO / "samples" / "runs"
WHY, PAIRS = RUNS / "why", RUNS / "pairs"
SLOWER_EXIT = 8  # documented in README: profkit diff --fail-if-slower


@dataclass(frozen=True)
class Pair:
    base: str  # run folder under samples/runs
    new: str
    verdict: str
    per: str = "step"  # what the verdict is per: step, or sample when the batch changed
    says: tuple[str, ...] = field(default=())  # phrases the reasons or "what changed" hold

    @property
    def id(self) -> str:
        return f"{self.base}->{Path(self.new).name}"


PAIR_TABLE = [
    Pair("why/eltwise_chain", "why/eltwise_chain_fixed", "improved",
         says=("now compiled (torch.compile)", "kernels fused: 16 -> 1 per step")),
    Pair("why/precision", "why/precision_fixed", "improved", says=("GEMMs now bf16 (were fp32)",)),
    Pair("why/attention_math", "why/attention_flash", "improved",
         says=("attention now flash (was math)",)),
    Pair("why/gpt_b8", "why/gpt_b32", "improved", per="sample"),
    Pair("why/kv_nocache", "why/kv_cache", "unchanged", says=("counted FLOPs per step",)),
    Pair("why/gpt_4l", "why/gpt_6l", NOT_COMPARABLE, says=("parameter shapes differ: 4 vs 6 blocks",)),
    Pair("why/cpu_optimizer", "why/cpu_optimizer_fixed", "improved",
         says=("optimizer step on the host",)),
    Pair("why/preprocess", "why/preprocess_fixed", "improved",
         says=("batches now from DataLoader worker processes",)),
    Pair("why/graph_hooks", "why/graph_hooks_fixed", "improved"),
    Pair("why/recompile", "why/recompile_fixed", "improved",
         says=("torch.compile compiling inside the steps",)),
    Pair("pairs/same_compute/a", "pairs/same_compute/b", "unchanged"),
    Pair("pairs/round_trip/before", "pairs/round_trip/after", "improved"),
    Pair("pairs/host_sync/before", "pairs/host_sync/after", "improved"),
    Pair("pairs/data_loading/before", "pairs/data_loading/after", "improved"),
    Pair("pairs/cuda_graphs/before", "pairs/cuda_graphs/after", "improved",
         says=("now replays CUDA graphs",)),
    Pair("pairs/launch_sync/before", "pairs/launch_sync/after", "unchanged"),
    Pair("pairs/straggler_sleep/before", "pairs/straggler_sleep/after", "improved"),
    Pair("zoo/straggler", "zoo/balanced", "improved"),
    # 2 x H200: the same compiled sequence-parallel MLP, then with async TP; the profiled
    # steps 30.3-31.8 vs 33.0-41.7 ms (slower under the profiler; -5.3% after it)
    Pair("parallel/tp_sp", "parallel/tp_async", "unchanged", says=("async TP now on",)),
]


def analysis(run: str):
    return analysed(RUNS / run)


@cache
def diff(base: str, new: str, items: tuple | None = None):
    return diff_analyses(analysis(base), analysis(new), items_per_step=items)


# --- the workloads' own measurements ---------------------------------------------------------

def sample_line(run: str) -> dict:
    """The run's own PROFKIT_SAMPLE line (CUDA-event step times, batch, layers)."""
    kind, _, name = run.partition("/")
    if kind == "why":
        return sample_labels(WHY / "SUMMARY.txt")[f"why_{name}"]
    if kind == "pairs":
        return sample_labels(PAIRS / "SUMMARY.txt")[name]
    if kind == "parallel":  # rank 0's line
        return sample_labels(RUNS / "parallel" / "SUMMARY.txt")[name]
    return sample_labels(RUNS / "SUMMARY.txt")[f"zoo_{name}"]


def profiled_ms(run: str) -> np.ndarray:
    """CUDA-event times of the steps the profiler recorded (run.json's schedule: wait and
    warm-up steps first, then ``active`` recorded ones)."""
    schedule = json.loads((RUNS / run / "run.json").read_text())["profiler"]
    first = schedule.get("wait", 1) + schedule.get("warmup", 1)
    return np.array(sample_line(run)["step_ms"][first:first + schedule["active"]])


def measured_change(pair: Pair) -> float:
    base, new = profiled_ms(pair.base), profiled_ms(pair.new)
    if pair.per == "sample":
        base, new = base / sample_line(pair.base)["batch"], new / sample_line(pair.new)["batch"]
    return float(np.median(new) / np.median(base) - 1.0)


# --- the table ---------------------------------------------------------------------------------

@pytest.mark.parametrize("pair", PAIR_TABLE, ids=lambda p: p.id)
def test_verdict_matches_the_measured_change(pair: Pair):
    v = diff(pair.base, pair.new).verdict
    assert v["verdict"] == pair.verdict, v["summary"]
    words = " | ".join(v["reasons"] + v["changes"])
    for phrase in pair.says:
        assert phrase in words, (phrase, words)
    if pair.verdict == NOT_COMPARABLE:
        assert v["reasons"] and v["summary"].startswith(f"{NOT_COMPARABLE}: ")
        return
    assert v["reasons"] == [] and v["warnings"] == [], v["summary"]  # one GPU, one world size
    assert v["basis"] == pair.per
    measured = measured_change(pair)
    assert v["change_frac"] == pytest.approx(measured, abs=0.03), (measured, v["summary"])
    if v["tested"]:
        lo, hi = v["interval_frac"]
        assert lo <= measured <= hi
    if pair.verdict == "improved":
        assert measured < -0.05 and v["change_frac"] < 0
    if pair.verdict == "unchanged":  # the profiled steps themselves cannot tell them apart
        base, new = profiled_ms(pair.base), profiled_ms(pair.new)
        assert abs(measured) < 0.25 or (new.max() > base.min() and new.min() < base.max())


def test_another_model_is_not_comparable_with_the_layers_that_differ():
    """gpt_4l and gpt_6l: 4 vs 6 layers (SUMMARY), 8 x 512 vs 16 x 256 tokens; the positional
    table is 512 vs 256 long. The step times are shown, not judged."""
    v = diff("why/gpt_4l", "why/gpt_6l").verdict
    [reason] = v["reasons"]
    layers = sample_line("why/gpt_4l")["layers"], sample_line("why/gpt_6l")["layers"]
    assert reason.startswith(f"parameter shapes differ: {layers[0]} vs {layers[1]} blocks (linear ")
    assert "embedding 512x1024 only in base, embedding 256x1024 only in new" in reason
    assert "not judged" in v["summary"] and "improved" not in v["summary"]
    assert v["evidence"]["params"] == "differ" and v["nature"] == []


def test_a_larger_batch_is_judged_per_sample():
    """gpt_b8 -> gpt_b32: the same model (same parameter shapes), token ids 8x512 -> 32x512."""
    d = diff("why/gpt_b8", "why/gpt_b32")
    v = d.verdict
    assert v["items_per_step"] == [8, 32] and v["evidence"]["params"] == "same"
    assert "per sample" in v["headline"] and "batch 8 -> 32" in v["headline"]
    per_step = profiled_ms("why/gpt_b32").mean() / profiled_ms("why/gpt_b8").mean() - 1
    assert v["step_change_frac"] == pytest.approx(per_step, abs=0.03)  # -13% per step
    parts = d.tables["diff_parts"].set_index("part")
    assert {"base_us_per_sample", "new_us_per_sample", "delta_us_per_sample"} <= set(parts.columns)
    # 4x the compute per step, less per sample
    assert parts.loc["compute", "delta_ms"] > 0 > parts.loc["compute", "delta_us_per_sample"]


def test_items_per_step_given_by_the_user():
    """--items-per-step 4096,16384 (tokens, SUMMARY's tokens_per_step): per item."""
    tokens = tuple(sample_line(r)["tokens_per_step"] for r in ("why/gpt_b8", "why/gpt_b32"))
    v = diff("why/gpt_b8", "why/gpt_b32", tokens).verdict
    assert v["basis"] == "item" and v["items_per_step"] == list(map(float, tokens))
    assert v["verdict"] == "improved" and "per item" in v["headline"]


def test_the_nature_of_each_change_is_named_and_the_model_is_the_same():
    for base, new, params in (("why/precision", "why/precision_fixed", "same"),
                              ("why/attention_math", "why/attention_flash", "same"),
                              ("why/eltwise_chain", "why/eltwise_chain_fixed", "unknown")):
        v = diff(base, new).verdict
        assert v["evidence"]["params"] == params, v["evidence"]["params_text"]
        assert v["evidence"]["inputs"] == "same", v["evidence"]["inputs_text"]
    # the precision pair's GEMMs as ncu saw them: fp32 on the FMA pipes, then bf16 nvjet
    assert diff("why/precision", "why/precision_fixed").verdict["nature"] == ["GEMMs now bf16 (were fp32)"]


def test_kv_cache_names_the_flops_it_saves():
    """FlopCounterMode: 6.112 -> 0.522 TFLOP per step (11.7x less); profkit counts the same
    ops from their shapes."""
    [line] = [c for c in diff("why/kv_nocache", "why/kv_cache").verdict["nature"]
              if c.startswith("counted FLOPs per step")]
    truth = sample_line("why/kv_cache")["flop_per_step"] / sample_line("why/kv_nocache")["flop_per_step"]
    ratio = float(line.rsplit("(", 1)[1].removesuffix("x)"))
    assert ratio == pytest.approx(truth, rel=0.1)


def test_attribution_uses_short_kernel_names_and_hides_unchanged_rows():
    d = diff("why/eltwise_chain", "why/eltwise_chain_fixed")
    kernels = d.tables["diff_kernels"]
    assert "short_name" in kernels and (kernels["delta_ms"].round(3) != 0).all()
    groups = d.tables["diff_kernel_groups"].set_index("group")
    assert groups.loc["elementwise", "base_calls"] == 14 and groups.loc["elementwise", "new_calls"] == 0
    text = diff_to_text(d)
    assert "What changed:\n- now compiled (torch.compile)\n- kernels fused: 16 -> 1 per step" in text
    assert "triton_red_fused" in text and "void at::native" not in text
    for name, table in d.tables.items():  # the report shows no change that rounds to 0.000
        assert (shown(name, table)["delta_ms"].round(3) != 0).all(), name
    same = diff("why/precision", "why/precision")
    assert all(same.tables[t].empty for t in ("diff_kernels", "diff_ops", "diff_kernel_groups"))
    json.dumps(diff_to_json(d))


# --- the CI gate --------------------------------------------------------------------------------

def test_gate_trips_only_beyond_the_noise():
    """straggler_sleep backwards (the balanced run as base): 8.48 -> 9.81 ms per profiled
    step (+16%, 10 steps a side, an interval); same_compute: +4% with 3 steps, noise."""
    slower = diff("pairs/straggler_sleep/after", "pairs/straggler_sleep/before")
    lo, hi = slower.verdict["interval_frac"]
    assert slower.verdict["verdict"] == "regressed" and 0.05 < lo < hi
    assert slower_than(slower, 5) and not slower_than(slower, 100 * lo + 1)
    noise = diff("pairs/same_compute/a", "pairs/same_compute/b")
    assert noise.verdict["verdict"] == "unchanged" and not slower_than(noise, 0)
    other = diff("why/gpt_4l", "why/gpt_6l")  # +27% per step, but another model
    assert not slower_than(other, 0)


@pytest.fixture
def diff_cli(profkit_main):
    """``profkit diff ARGS --no-cache --workers 1``, in this process."""
    return lambda *args: profkit_main("diff", *args, "--no-cache", "--workers", "1")


def test_cli_fail_if_slower_exit_code(diff_cli):
    after, before = RUNS / "pairs/straggler_sleep/after", RUNS / "pairs/straggler_sleep/before"
    proc = diff_cli(after, before, "--fail-if-slower", "5")
    assert proc.returncode == SLOWER_EXIT, proc.stderr
    assert "--fail-if-slower 5: slower beyond the noise" in proc.stderr
    proc = diff_cli(after, before, "--fail-if-slower", "50%", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"]["verdict"] == "regressed"
    assert "--fail-if-slower 50: passed (regressed" in proc.stderr


def test_cli_items_per_step_and_bad_values(diff_cli):
    proc = diff_cli(WHY / "gpt_b8", WHY / "gpt_b32", "--items-per-step", "4096,16384")
    assert proc.returncode == 0, proc.stderr
    assert "per item" in proc.stdout and "4096 -> 16384 items per step" in proc.stdout
    for bad in ("8", "8,0", "a,b"):
        proc = diff_cli(WHY / "gpt_b8", WHY / "gpt_b32", "--items-per-step", bad)
        assert proc.returncode == 2 and "--items-per-step" in proc.stderr
