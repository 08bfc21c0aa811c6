"""Timing that cannot be real: a rank whose events all start at one instant is named by one
finding and measured no further (before: a ValueError traceback when the durations were 0,
and figures such as 147% of the link's bandwidth when they were real), and a derived figure
that breaks physics (bandwidth above the link's peak, MFU above 100%, a saving larger than
its step) becomes a note saying why, never a number."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.findings.consolidate import _trusted_saving
from profkit.analyzers.result import Finding

from profkit import cli
from tests.conftest import REPO

STOCK = REPO / "samples" / "runs" / "stock_ddp"
COMM = REPO / "samples" / "runs" / "zoo" / "communication"
TRANSFER = REPO / "samples" / "runs" / "diagnosis" / "transfer"  # 1 GiB pinned HtoD per step


def collapsed_run(tmp_path: Path, keep_durations: bool) -> Path:
    """stock_ddp with every event of rank 1 moved to one instant (durations kept or 0)."""
    run = tmp_path / "run"
    run.mkdir()
    r0, r1 = sorted(STOCK.glob("rank*"))
    shutil.copy(r0, run / "rank0.pt.trace.json.gz")
    doc = json.loads(gzip.decompress(r1.read_bytes()))
    first_us = min(e["ts"] for e in doc["traceEvents"] if "ts" in e)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = first_us
        if "dur" in e and not keep_durations:
            e["dur"] = 0
    (run / "rank1.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    return run


def percents(text: str, header: str) -> list[float]:
    """Every percentage in the section of the text report that starts with ``header``."""
    section = text.split(header, 1)[1].split("\n\n", 1)[0] if header in text else ""
    return [float(p) for p in re.findall(r"(\d+(?:\.\d+)?)%", section)]


@pytest.mark.parametrize("keep_durations", [False, True])
def test_a_rank_with_one_instant_is_named_once_never_measured(tmp_path, capsys, keep_durations):
    run = collapsed_run(tmp_path, keep_durations)
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "analysis failed" not in out
    assert "2 of 2 ranks analysed" in out and "steps used: rank 0: 3 of 3" in out
    lines = [line for line in out.splitlines() if "start at the same instant" in line]
    assert len(lines) == 1 and lines[0].startswith("- [critical] rank 1: 9289 of its 9289 events")
    assert all(p <= 100 for p in percents(out, "Collectives (matched"))
    assert all(p <= 100 for p in percents(out, "Efficiency (per rank)"))
    assert "\n     1 " not in out.split("Step time by part", 1)[1].split("\n\n", 1)[0]


def test_only_collapsed_ranks_gives_no_verdict_and_says_why(tmp_path):
    run = collapsed_run(tmp_path, keep_durations=True)
    (run / "rank0.pt.trace.json.gz").unlink()
    analysis = analyze_run(run, cache=False, workers=1)
    assert analysis.verdict["primary"] is None
    assert analysis.verdict["summary"].startswith("the trace's events all start at one instant")


def squeeze(run: Path, rank: int, kind: str) -> None:
    """Rank ``rank``'s GPU events of category ``kind`` last 10 ns: any bandwidth computed
    from them is far above any link."""
    path = run / "traces" / f"rank{rank}.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == kind:
            e["dur"] = 0.01
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_bandwidth_above_the_link_is_a_note_not_a_number(tmp_path, capsys):
    run = Path(shutil.copytree(COMM, tmp_path / "run"))
    squeeze(run, 0, "kernel")  # NCCL kernels: latency is the shortest rank's
    squeeze(run, 1, "kernel")
    analysis = analyze_run(run, cache=False, workers=1)
    busbw = analysis.table("collectives")["busbw_gbps"]
    assert busbw.isna().any() and not (busbw > 450).any()
    notes = [n for n in analysis.run["notes"] if "bus bandwidth above the link's 450 GB/s" in n]
    assert len(notes) == 1 and "cannot be trusted" in notes[0]
    assert not (analysis.table("collective_links")["link_util"] > 1).any()
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert all(p <= 100 for p in percents(out, "Collectives (matched"))
    assert "note: " in out and "bus bandwidth above the link's 450 GB/s" in out


def test_a_copy_faster_than_its_link_is_a_note(tmp_path, capsys):
    run = Path(shutil.copytree(TRANSFER, tmp_path / "run"))
    squeeze(run, 0, "gpu_memcpy")
    analysis = analyze_run(run, cache=False, workers=1)
    moved = analysis.table("transfers")
    assert len(moved) and not (moved["achieved_gbps"] > moved["peak_gbps"]).any()
    assert [n for n in analysis.run["notes"] if "faster than their link" in n]
    assert cli.main(["analyze", str(run), "--no-cache", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert percents(out, "Transfers (memory copies") == []  # '-', not 170413570%
    assert "faster than their link (up to" in out


def test_mfu_above_100_percent_is_a_note(tmp_path):
    analysis = analyze_run(COMM, cache=False, workers=1, flops_per_step=1e18)
    eff = analysis.table("efficiency")
    assert eff["mfu"].isna().all() and eff["achieved_tflops"].isna().all()
    # one info finding for both ranks with the reason (1e18 FLOPs a step against the peak);
    # not a second note in the run's header
    said = [f for f in analysis.findings if "would exceed 100%" in f.message]
    assert len(said) == 1 and said[0].severity == "info"
    assert said[0].message.startswith("MFU and HFU not shown on ranks 0-1")
    assert "TFLOP/s counted against" in said[0].message
    assert not [n for n in analysis.run["notes"] if "MFU" in n]


@pytest.mark.parametrize("ms, fraction", [(30.0, 1.5), (float("nan"), 0.2), (-4.0, -0.2)])
def test_a_saving_larger_than_its_step_is_dropped_with_the_reason(ms, fraction):
    f = Finding("cpu_launch", "warning", "m", "r", rank=1).with_saving(ms, fraction)
    kept = _trusted_saving(f)
    assert kept.estimated_saving is None
    assert "cannot be trusted" in kept.evidence["saving_untrusted"]
    fine = Finding("cpu_launch", "warning", "m", "r", rank=1).with_saving(3.0, 0.5)
    assert _trusted_saving(fine) is fine and np.isclose(fine.estimated_saving["fraction"], 0.5)
