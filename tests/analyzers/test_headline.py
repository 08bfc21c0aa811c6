"""Issue 42, items 1-3: the biggest win beside the verdict, one combined saving where the
findings' savings share time, one figure one value, on the bundled runs (labels in
samples/runs/*/SUMMARY.txt and README.md)."""

import json
import re
from pathlib import Path

import pytest
from profkit.analyzers.api import analyze
from profkit.analyzers.findings.combined import biggest_win, combined_saving
from profkit.analyzers.report.html import analysis_html
from profkit.analyzers.report.render import to_json, to_text

RUNS = Path(__file__).resolve().parents[2] / "samples" / "runs"


@pytest.fixture(scope="module")
def hf():
    return analyze(RUNS / "frameworks" / "hf_trainer")


@pytest.fixture(scope="module")
def fsdp():
    return analyze(RUNS / "profkit_fsdp")


def _saving(a, category, rank):
    f = next(f for f in a.findings if f.category == category and f.rank == rank)
    return f.estimated_saving["ms_per_step"]


@pytest.mark.parametrize("name", ["hf", "fsdp"])
def test_straggler_and_its_own_host_findings_share_time(name, request):
    """Rank 1 straggles because of its own host (its launch overhead and host work): the three
    savings are one time seen from two ranks. Acting on all of them ends the others' wait
    (the straggler's saving, on rank 0's step) while rank 1's own step drops below that
    (its step less its two host savings): the job saves the straggler's saving, not the sum."""
    a = request.getfixturevalue(name)
    c = combined_saving(a.findings, a.table("rank_breakdown"))
    members = {(m["category"], m["rank"]) for m in c["members"]}
    assert members == {("straggler", 1), ("cpu_launch", 1), ("host_work", 1)}
    parts = [_saving(a, "straggler", 1), _saving(a, "cpu_launch", 1), _saving(a, "host_work", 1)]
    ranks = a.table("rank_breakdown").set_index("rank")["step_time_ms"]
    rank0_after = ranks[0] - parts[0]
    rank1_after = ranks[1] - parts[1] - parts[2]
    assert rank1_after < rank0_after  # rank 0, still waiting on nothing, sets the step
    assert c["ms_per_step"] == pytest.approx(ranks[0] - rank0_after, abs=0.01)
    assert c["sum_ms"] == pytest.approx(sum(parts), abs=0.01)
    assert c["ms_per_step"] < sum(parts) and c["fraction"] < 1
    assert c["shared"] == [[0, 1, 2]]


def test_text_opens_with_the_biggest_win_then_the_verdict(hf):
    lines = to_text(hf).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(("BIGGEST WIN", "VERDICT")))
    assert lines[first].startswith("BIGGEST WIN: rank 1 straggler, with its launch overhead "
                                   "and host work")
    assert any(line.startswith("VERDICT: ") for line in lines[first + 1:first + 4])
    text = " ".join(to_text(hf).split())
    total = sum(_saving(hf, c, 1) for c in ("straggler", "cpu_launch", "host_work"))
    assert f"not the {total:.2f} ms their savings add up to" in text
    assert "launch overhead and host work are the time the others wait for it" in text


def test_json_and_html_carry_the_combined_saving(fsdp):
    doc = json.loads(json.dumps(to_json(fsdp)))
    assert doc["combined_saving"]["ms_per_step"] == pytest.approx(
        _saving(fsdp, "straggler", 1), abs=0.01)
    assert len(doc["combined_saving"]["members"]) == 3
    assert doc["biggest_win"]["lead"]["category"] == "straggler"
    page = analysis_html(fsdp)
    assert page.index("Biggest win:") < page.index("compute bound")
    assert "their savings add up to" in page


@pytest.mark.parametrize("run,cause", [("cpu_launch", "cpu_launch"), ("data_loading", "data_loading"),
                                       ("host_sync", "host_sync"), ("straggler", "straggler"),
                                       ("round_trip", "host_work")])
def test_the_zoo_s_biggest_win_is_its_labelled_cause(run, cause):
    """samples/runs/zoo: each run provokes one cause (README.md); round_trip's sync and host
    work fold into one host-work finding."""
    a = analyze(RUNS / "zoo" / run)
    win = biggest_win(a.findings, a.table("rank_breakdown"))
    assert win["lead"]["category"] == cause
    assert 0 < win["fraction"] <= 1
    assert win["ms_per_step"] <= win["step_ms"]


def test_no_combined_saving_ever_passes_the_step():
    zoo = [p for p in (RUNS / "zoo").iterdir() if not p.name.startswith(".")]  # no caches
    for run in sorted(zoo) + [RUNS / "layout" / "mesh", RUNS / "parallel" / "mesh2x2"]:
        a = analyze(run)
        c = combined_saving(a.findings, a.table("rank_breakdown"))
        if c is not None:
            assert 0 <= c["ms_per_step"] <= c["step_ms"], run


def test_one_straggler_wait_reads_the_same_in_verdict_and_finding(hf):
    text = " ".join(to_text(hf).split())
    waits = set(re.findall(r"lose (\d+\.\d+) ms per step", text))
    assert len(waits) == 1, waits


def test_one_share_reads_the_same_in_the_legend_and_the_rank_bar():
    """zoo/compute has one rank: the run's compute share and rank 0's are one value (99.0%
    against 98.9% before: the run's was rounded twice)."""
    page = analysis_html(analyze(RUNS / "zoo" / "compute"))
    titles = set(re.findall(r'title="compute: ([\d.]+%)"', page))
    legend = set(re.findall(r"</span> compute ([\d.]+%)</span>", page))
    assert len(titles | legend) == 1, (titles, legend)


def test_memory_bound_share_reads_as_part_of_the_compute():
    """memory/gpt_b64: compute-bound, with memory-bound kernels a share of that compute: one
    statement, not two causes."""
    a = analyze(RUNS / "memory" / "gpt_b64")
    verdict = next(line for line in to_text(a).splitlines() if line.startswith("VERDICT"))
    m = re.search(r"compute bound: (\d+)% of step time \(of it, memory-bound kernels: (\d+)% "
                  r"of the step\)", verdict)
    assert m and int(m.group(2)) <= int(m.group(1))


def _measured_step_ms(label: str) -> float:
    """The workload's own median step (samples/runs/pairs/SUMMARY.txt), rank 0."""
    line = next(ln for ln in (RUNS / "pairs" / "SUMMARY.txt").read_text().splitlines()
                if ln.startswith(label + " PROFKIT_SAMPLE "))
    return json.loads(line.split(" PROFKIT_SAMPLE ", 1)[1])["median_step_ms"]


def test_the_combined_saving_meets_the_measured_fix_where_the_sum_does_not():
    """pairs/straggler_sleep: rank 1 sleeps 3 ms on its host each step; removing it took rank
    0's step from 9.81 to 8.544 ms (12.9%). The straggler and rank 1's host work are that
    one sleep: their savings add to ~31% of the step, the combined one stays within the
    what-if bar (0.15) of the measured fix."""
    a = analyze(RUNS / "pairs" / "straggler_sleep" / "before")
    before, after = (_measured_step_ms("straggler_sleep/before"),
                     _measured_step_ms("straggler_sleep/after"))
    measured = (before - after) / before
    c = combined_saving(a.findings, a.table("rank_breakdown"))
    assert {m["category"] for m in c["members"]} == {"straggler", "host_work"}
    assert abs(c["fraction"] - measured) <= 0.15
    assert c["sum_ms"] / c["step_ms"] - measured > 0.15  # adding them up would miss the bar


def test_the_memory_bound_finding_names_the_compute_it_is_part_of():
    a = analyze(RUNS / "memory" / "gpt_b64")
    compute = re.search(r"compute bound: (\d+)%", a.verdict["summary"]).group(1)
    finding = next(f for f in a.findings if f.category == "memory_bound")
    assert f"of the step is memory-bound kernels, within its {compute}% in compute" \
        in finding.message


def test_recompute_and_launch_overhead_share_the_host_idle_time():
    """memory/ckpt_on: activation recompute's saving is its kernels' time (3.07 ms) plus the
    GPU idle while the host runs them again (3.48 ms): that idle is launch-overhead time
    already in the launch-overhead finding. Together: the kernels plus the larger of the
    two idles, not the sum."""
    a = analyze(RUNS / "memory" / "ckpt_on")
    rec = next(f for f in a.findings if f.category == "recompute")
    launch = _saving(a, "cpu_launch", 0)
    ms = rec.estimated_saving["ms_per_step"]
    idle_ms = ms * rec.evidence["idle_ns"] / rec.evidence["saving_ns"]
    expected = (ms - idle_ms) + max(launch, idle_ms)
    c = combined_saving(a.findings, a.table("rank_breakdown"))
    assert {m["category"] for m in c["members"]} == {"cpu_launch", "recompute"}
    assert c["ms_per_step"] == pytest.approx(expected, abs=0.01)
    assert c["ms_per_step"] < launch + ms and c["shared"] == [[0, 1]]
