import pandas as pd
import pytest
from profkit.analyzers.findings.judge import judged
from profkit.analyzers.measure.comms import analyze_collectives
from profkit.analyzers.measure.links import analyze_links, link_peak_gbps
from profkit.analyzers.result import Result

from profkit.run.loader import load_run
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"


def test_h200_link_and_the_communication_zoo_run():
    run = load_run(RUNS / "zoo" / "communication", cache=False)
    assert link_peak_gbps(run) == (450.0, "H200")
    res = judged(analyze_links(run, analyze_collectives(run)))
    big = res.tables["collective_links"]
    big = big[big["bytes"] >= 256 << 20]
    # 512 MiB all_reduces measured at ~316 GB/s bus bandwidth (comms tests): ~70% of 450.
    assert big["link_util"].between(0.5, 0.95).all() and len(big) > 0
    assert res.findings == []


def test_slow_large_collectives_are_flagged():
    run = load_run(RUNS / "zoo" / "communication", cache=False)
    slow = pd.DataFrame({"key": ["a", "b"], "collective": ["all_reduce"] * 2,
                         "bytes": [64 << 20, 64 << 20], "busbw_gbps": [40.0, 50.0]})
    res = judged(analyze_links(run, Result(tables={"collectives": slow})))
    assert res.tables["collective_links"]["link_util"].tolist() == pytest.approx([40 / 450, 50 / 450])
    (finding,) = res.findings
    assert finding.severity == "warning" and "10% of the H200" in finding.message


def test_runs_over_several_hosts_are_not_judged():
    run = load_run(RUNS / "zoo" / "communication", cache=False)
    run.meta["hosts"] = ["a", "b"]
    link, _ = link_peak_gbps(run)
    assert link != link  # NaN
