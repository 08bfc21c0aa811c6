import json
import subprocess
import sys

import numpy as np
import pytest
from profkit.analyzers.diff import diff_runs, diff_to_json, diff_to_text, diff_verdict, step_noise
from profkit.analyzers.thresholds import DEFAULT

from profkit.loader import load_run
from tests.conftest import CORPUS, REPO

ZOO = REPO / "samples" / "runs" / "zoo"


def test_noise_is_the_standard_error_of_the_difference():
    # var([10, 12]) = 2 on each side: sqrt(2/2 + 2/2) = 1.4142, over the base median 11.
    assert step_noise(np.array([10.0, 12.0]), np.array([10.0, 12.0])) == pytest.approx(1.41421 / 11, rel=1e-4)
    assert step_noise(np.array([10.0]), np.array([10.0, 12.0])) == 0.0


@pytest.mark.parametrize("base, new, verdict", [
    ([100, 101, 99, 100], [90, 91, 89, 90], "improved"),     # -10%, noise ~0.6%
    ([100, 101, 99, 100], [101, 100, 100, 100], "unchanged"),  # +0.25% < 2% floor
    ([100, 140, 60, 100], [110, 150, 70, 110], "unchanged"),   # +10% but noise ~23%: 2 sigma ~46%
    ([100, 101, 99, 100], [120, 121, 119, 120], "regressed"),
])
def test_verdict_weighs_the_change_against_the_noise(base, new, verdict):
    assert diff_verdict(np.array(base) * 1e6, np.array(new) * 1e6, DEFAULT)["verdict"] == verdict


def test_a_run_against_itself_is_unchanged():
    run = load_run(ZOO / "balanced", cache=False)
    d = diff_runs(run, run)
    assert d.verdict["verdict"] == "unchanged" and d.verdict["change_frac"] == 0.0
    for table in d.tables.values():
        assert (table["delta_ms"] == 0).all()


def test_the_planted_straggler_is_a_regression_in_compute_and_communication():
    """zoo/straggler is zoo/balanced plus extra matmuls on rank 1 before the all_reduce."""
    d = diff_runs(load_run(ZOO / "balanced", cache=False), load_run(ZOO / "straggler", cache=False))
    assert d.verdict["verdict"] == "regressed"
    parts = d.tables["diff_parts"].set_index("part")["delta_ms"]
    assert parts["compute"] > 0.5 and parts["communication"] > 0.3
    top = d.tables["diff_kernels"].head(2)["name"].astype(str)
    assert any(n.startswith("ncclDevKernel_AllReduce") for n in top)
    assert "regressed" in diff_to_text(d) and "**Verdict:** regressed" in diff_to_text(d, True)


def test_cli_diff_json(tmp_path):
    out = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, "-m", "profkit", "diff", ZOO / "balanced", ZOO / "straggler",
                           "--format", "json", "-o", out], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "profkit.diff/1" and doc["verdict"]["verdict"] == "regressed"
    assert {"part", "base_ms", "new_ms", "delta_ms"} <= set(doc["diff_parts"][0])


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")
def test_corpus_diff_pairs_do_not_crash():
    for base, new in (("hta/trace_diff/control", "hta/trace_diff/test"),
                      ("tracelens/h100", "tracelens/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")):
        d = diff_runs(load_run(CORPUS / base, cache=False), load_run(CORPUS / new, cache=False))
        assert d.verdict["verdict"] in ("improved", "regressed", "unchanged")
        json.dumps(diff_to_json(d))
