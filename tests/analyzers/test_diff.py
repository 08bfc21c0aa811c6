"""profkit diff: the interval and the verdict worked out by hand, then real pairs with a
known answer (the public ResNet-50 pair, the same workload captured twice, round trips
removed, inference vs training, A100 vs V100, a planted straggler)."""

import itertools
import json
import shutil
from collections import Counter

import numpy as np
import pytest
import tomllib
from profkit.analyzers.compare import stats
from profkit.analyzers.compare.diff import diff_analyses, step_verdict
from profkit.analyzers.options import AnalysisOptions
from profkit.analyzers.report.diff_text import diff_to_json, diff_to_text
from profkit.analyzers.thresholds import DEFAULT

from profkit import schema as S
from tests.analysed import analysed, loaded
from tests.conftest import CORPUS, REPO

RUNS = REPO / "samples" / "runs"
ZOO = RUNS / "zoo"
PAIRS = RUNS / "pairs"
PUBLIC = REPO / "tests" / "data" / "public"
HTA = CORPUS / "hta" / "trace_diff"


def analysis(path, **options):
    """analyze_run(path) with these analysis options, once per test process."""
    return analysed(path, options=AnalysisOptions(**options) if options else None)


def diff(base, new, **options):
    return diff_analyses(analysis(base, **options), analysis(new, **options))


# --- the interval -------------------------------------------------------------------------

def brute_u_cdf(n: int, m: int) -> np.ndarray:
    """P(U <= u) by listing every placement of n base values among n + m ranks."""
    counts = Counter()
    for base_ranks in itertools.combinations(range(n + m), n):
        # U: pairs (base, new) with the base value above the new one
        counts[sum(r - i for i, r in enumerate(base_ranks))] += 1
    total = sum(counts.values())
    return np.cumsum([counts[u] for u in range(n * m + 1)]) / total


@pytest.mark.parametrize("n, m", [(1, 1), (1, 4), (2, 3), (3, 3), (4, 4), (6, 4), (5, 7)])
def test_mann_whitney_null_distribution_matches_enumeration(n, m):
    assert np.allclose(stats.u_null_cdf(n, m), brute_u_cdf(n, m), rtol=0, atol=1e-12)


def test_hodges_lehmann_interval_by_hand():
    # 16 differences new - base: 7 x1, 8 x2, 9 x3, 10 x4, 11 x3, 12 x2, 13 x1 -> median 10.
    # n = m = 4: P(U = 0) = 1/70 <= 0.025 < P(U <= 1) = 2/70, so the 95% interval is cut
    # at the first smallest and largest difference, with coverage 1 - 2/70.
    shift = stats.shift_interval(np.array([1, 2, 3, 4.0]), np.array([11, 12, 13, 14.0]), 0.95)
    assert (shift.estimate, shift.low, shift.high) == (10.0, 7.0, 13.0)
    assert shift.confidence == pytest.approx(68 / 70)


def test_too_few_steps_give_no_interval():
    # 3 and 3 steps: the most extreme ordering has probability 2/20 = 0.1 > 0.05
    assert stats.shift_interval(np.array([1, 2, 3.0]), np.array([7, 8, 9.0]), 0.95) is None
    assert stats.min_steps(0.95) == 4  # 2 / C(8, 4) = 0.029
    assert stats.min_steps(0.99) == 5  # 2 / C(8, 4) = 0.029 > 0.01, 2 / C(10, 5) = 0.008


def test_large_samples_use_the_normal_cut_close_to_the_exact_one():
    rng = np.random.default_rng(7)
    base, new = rng.normal(100, 5, 60), rng.normal(97, 5, 60)  # 3600 pairs: normal cut
    exact = stats.u_null_cdf(60, 60)
    k = int(np.searchsorted(exact, 0.025, side="right"))  # the exact cut, for comparison
    diffs = np.sort((new[None, :] - base[:, None]).ravel())
    shift = stats.shift_interval(base, new, 0.95)
    assert diffs[k - 2] <= shift.low <= diffs[k] and diffs[-k - 1] <= shift.high <= diffs[-k + 1]


# --- the verdict --------------------------------------------------------------------------

@pytest.mark.parametrize("base, new, verdict", [
    ([100, 101, 99, 100, 102], [90, 91, 89, 90, 92], "improved"),    # every pair -8 to -13
    ([100, 101, 99, 100], [120, 121, 119, 120], "regressed"),
    ([100, 101, 99, 100], [101, 100, 100, 102], "unchanged"),        # interval holds 0
    ([100, 140, 60, 100, 120], [110, 150, 70, 110, 90], "unchanged"),  # +10%, noisy
    ([100, 100.5, 100, 101], [101.5, 101.6, 101.7, 101.8], "unchanged"),  # +1.4% < 2% floor
])
def test_tested_verdicts(base, new, verdict):
    v = step_verdict(np.array(base) * 1e6, np.array(new) * 1e6, DEFAULT)
    assert v["verdict"] == verdict and v["tested"]
    lo, hi = v["interval_frac"]
    assert lo <= v["change_frac"] <= hi or verdict == "unchanged"


@pytest.mark.parametrize("base, new, verdict", [
    ([16.6, 16.3, 16.4], [16.8, 17.1, 18.0], "unchanged"),  # 1.04x slower: under 1.25x
    ([63.0, 63.4, 63.6], [11.3, 11.2, 11.2], "improved"),   # 5.7x faster, no overlap
    ([100, 50, 100], [60, 60, 101], "unchanged"),           # 1.67x faster but overlapping
    ([100], [130], "regressed"),                            # 1.30x slower
    ([100], [110], "unchanged"),                            # 1.10x slower
    ([100], [79], "improved"),                              # 1.27x faster (-21%)
    ([100], [81], "unchanged"),                             # 1.23x faster
])
def test_untested_verdicts_are_conservative_and_say_why(base, new, verdict):
    v = step_verdict(np.array(base) * 1e6, np.array(new) * 1e6, DEFAULT)
    assert v["verdict"] == verdict and not v["tested"] and v["noise_frac"] is None
    assert f"cannot estimate the noise from {len(base)} and {len(new)} steady step(s)" in v["summary"]
    assert "+/-0.0%" not in v["summary"]


# --- real pairs ---------------------------------------------------------------------------

def test_public_resnet50_pair_improved():
    """DataLoader workers 0 -> 4: steady steps ~175 -> ~125 ms. nw0 keeps all six steps
    (164-188 ms, within 25% of the median); nw4 leaves out step 5 (182 ms, profiler
    start-up) and step 9 (163 ms, one-off)."""
    d = diff(PUBLIC / "resnet50_nw0", PUBLIC / "resnet50_nw4")
    v = d.verdict
    assert v["verdict"] == "improved" and v["tested"]
    assert (v["base_steps"], v["new_steps"]) == (6, 4)
    assert v["interval_frac"][1] < 0 and v["warnings"] == [] and v["reasons"] == []
    parts = d.tables["diff_parts"].set_index("part")["delta_ms"]
    assert parts.idxmin() == "data_loading" and parts["data_loading"] < -50
    assert "DataLoader" in str(d.tables["diff_ops"]["name"].iloc[0])


def test_kernels_are_attributed_per_used_step():
    """The per-step kernel time of nw4 is over steps 6, 7, 8 and 10 only, as the raw events
    of those steps add up."""
    d = diff(PUBLIC / "resnet50_nw0", PUBLIC / "resnet50_nw4")
    ev = loaded(PUBLIC / "resnet50_nw4").ranks[0].events
    used = ev[ev[S.KIND].isin(S.GPU_KINDS) & ev[S.STEP].isin([6, 7, 8, 10])]
    per_step_ms = used.groupby(used[S.NAME].astype(str))[S.DUR_NS].sum() / 4 / 1e6
    table = d.tables["diff_kernels"].set_index("name")
    for name, row in table.iterrows():
        assert row["new_ms"] == pytest.approx(per_step_ms.get(name, 0.0))


def test_same_workload_captured_twice_is_unchanged():
    """zoo/compute twice on one H200: 16.94 vs 17.62 ms median by CUDA events (SUMMARY)."""
    d = diff(PAIRS / "same_compute" / "a", PAIRS / "same_compute" / "b")
    assert d.verdict["verdict"] == "unchanged" and d.verdict["warnings"] == []
    assert "cannot estimate the noise from 3 and 3 steady step(s)" in d.verdict["summary"]


def test_round_trips_removed_improved():
    """round_trip.py 63.6 ms -> --no-sync 11.2 ms (SUMMARY); its CPU ops differ (the 50
    .item() per step are gone) but it is the same work on the GPU."""
    d = diff(PAIRS / "round_trip" / "before", PAIRS / "round_trip" / "after")
    v = d.verdict
    assert v["verdict"] == "improved" and v["reasons"] == [] and v["warnings"] == []
    assert v["change_frac"] == pytest.approx(11.167 / 63.378 - 1, abs=0.01)
    assert "the bottleneck moved: host work bound -> compute bound" in v["changes"]


def test_inference_vs_training_is_not_comparable():
    d = diff(RUNS / "infer_kv", ZOO / "compute")
    v = d.verdict
    assert v["verdict"] == "not comparable"
    assert "inference (no backward) vs training (backward ops, optimizer steps)" in v["reasons"]
    assert v["summary"].startswith("not comparable: ") and "improved" not in v["summary"]


@pytest.mark.skipif(not HTA.is_dir(), reason="corpus not found")
def test_a100_vs_v100_is_judged_with_a_hardware_warning():
    d = diff(HTA / "control", HTA / "test")
    v = d.verdict
    assert "different GPUs: NVIDIA A100-PG509-200 vs Tesla V100-SXM2-16GB" in v["warnings"]
    assert "different world size: 8 vs 2" in v["warnings"]
    assert "WARNING: different GPUs" in v["summary"] and "+/-0.0%" not in v["summary"]
    assert v["tested"] and (v["base_steps"], v["new_steps"]) == (6, 5)
    text = diff_to_text(d)
    assert "\nWARNING: different GPUs" in text


def test_a_side_missing_a_rank_is_judged_with_a_warning(tmp_path):
    """zoo/straggler against itself without rank 1's trace: the same steps (unchanged), but
    the new side is half the run, which the verdict must say (as the report header does)."""
    part = tmp_path / "straggler-missing-rank"
    shutil.copytree(ZOO / "straggler", part, ignore=shutil.ignore_patterns(".profkit"))
    (part / "traces" / "rank1.pt.trace.json.gz").unlink()
    v = diff(ZOO / "straggler", part).verdict
    warning = "new: 1 of 2 ranks missing (1); its steps are those of the 1 rank analysed"
    assert v["warnings"] == [warning] and v["evidence"]["ranks_missing"] == [[], [1]]
    assert f"\nWARNING: {warning}" in diff_to_text(diff(ZOO / "straggler", part))


def test_a_straggler_that_appears_and_goes():
    """zoo/straggler is zoo/balanced plus extra matmuls on rank 1 before the all_reduce:
    8.16 -> 10.41 ms, 3 steps each (too few for an interval, but 27% and no overlap)."""
    d = diff(ZOO / "balanced", ZOO / "straggler")
    assert d.verdict["verdict"] == "regressed"
    assert any(c.startswith("rank 1 became a straggler: the others lose") for c in d.verdict["changes"])
    parts = d.tables["diff_parts"].set_index("part")["delta_ms"]
    assert parts["compute"] > 0.5 and parts["communication"] > 0.3
    back = diff(ZOO / "straggler", ZOO / "balanced")  # -21.6%: 1.28x faster, as symmetric
    assert back.verdict["verdict"] == "improved"
    assert any(c.startswith("rank 1 is no longer a straggler") for c in back.verdict["changes"])
    assert "Also changed:\n- rank 1 became a straggler" in diff_to_text(d)
    assert "**Verdict:** regressed" in diff_to_text(d, markdown=True)


def test_a_run_against_itself_is_unchanged():
    d = diff(ZOO / "balanced", ZOO / "balanced")
    assert d.verdict["verdict"] == "unchanged" and d.verdict["change_frac"] == 0.0
    for table in d.tables.values():
        assert (table["delta_ms"] == 0).all()


def test_steps_option_applies_to_both_sides():
    d = diff(PUBLIC / "resnet50_nw0", PUBLIC / "resnet50_nw4", steps=(6, 8))
    assert (d.verdict["base_steps"], d.verdict["new_steps"]) == (3, 3)
    assert not d.verdict["tested"] and d.verdict["verdict"] == "improved"  # -29%, no overlap


def test_cli_diff_json_with_analyze_options(tmp_path, profkit_main):
    out = tmp_path / "d.json"
    proc = profkit_main("diff", PUBLIC / "resnet50_nw0", PUBLIC / "resnet50_nw4", "--ranks", "0",
                        "--workers", "1", "--steps", "6:9", "--no-cache", "--format", "json",
                        "-o", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "profkit.diff/2" and doc["verdict"]["verdict"] == "improved"
    assert (doc["verdict"]["base_steps"], doc["verdict"]["new_steps"]) == (4, 4)
    assert doc["verdict"]["tested"] and "headline" not in doc["verdict"]
    assert {"part", "base_ms", "new_ms", "delta_ms"} <= set(doc["diff_parts"][0])
    assert proc.stdout.startswith(f"wrote {out}: improved: median step")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")
def test_corpus_diff_pairs_do_not_crash():
    for base, new in (("hta/trace_diff/control", "hta/trace_diff/test"),
                      ("tracelens/h100", "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")):
        d = diff(CORPUS / base, CORPUS / new)
        assert d.verdict["verdict"] in ("improved", "regressed", "unchanged", "not comparable")
        json.dumps(diff_to_json(d))


def test_diff_calls_every_savings_pair_right():
    """Each before/after pair of samples/runs/pairs with its cause removed: improved, except
    launch_sync, where removing the syncs saves 6% of a launch-bound loop and 3 steps per
    side cannot tell that from noise (unchanged)."""
    pairs = REPO / "samples" / "runs" / "pairs"
    for pair in sorted(p for p in pairs.iterdir() if (p / "pair.toml").is_file()):
        spec = tomllib.loads((pair / "pair.toml").read_text())
        runs = [analysed(pair / spec.get(side, side))
                for side in ("before", "after")]
        d = diff_analyses(*runs)
        expected = "unchanged" if pair.name == "launch_sync" else "improved"
        assert d.verdict["verdict"] == expected, (pair.name, d.verdict["summary"])
