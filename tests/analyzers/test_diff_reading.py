"""``profkit diff`` reads like ``profkit analyze`` (issue 42, item 5), on the bundled pairs:

- one vocabulary: the step parts by the labels ``analyze`` prints (``launch overhead``,
  ``host work``, ``held work``), in text, Markdown and HTML; the JSON keeps its keys;
- the text fits the terminal ($COLUMNS, 100 columns in a pipe) with names left-aligned;
- the Markdown's numbers have the precision their size needs, shares in %;
- the CI gate says why it passed: no interval from 3 steps a side, another workload.

The labels are written here from analyzers/parts.py's table as ``analyze`` prints them,
the step counts from each run's run.json (``profiler.active``), never from the diff.
"""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from profkit.analyzers.compare.diff import diff_analyses
from profkit.analyzers.report.diff_text import diff_to_json, diff_to_text
from profkit.analyzers.report.html import diff_html

from tests.analysed import analysed
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"
KEYS = ("cpu_launch", "host_work", "idle_other", "memcpy")
# how analyze's rank table names the parts these pairs spend time in
LABELS = {"cpu_launch": "launch overhead", "host_work": "host work", "idle_other": "held work",
          "host_sync": "host sync", "compute": "compute"}
PAIRS = (("memory/ckpt_on", "memory/ckpt_off"), ("pairs/launch_sync/before", "pairs/launch_sync/after"),
         ("parallel/pipeline_m4", "parallel/pipeline_m16"), ("why/preprocess", "why/preprocess_fixed"))


def diff(base: str, new: str):
    return diff_analyses(analysed(RUNS / base), analysed(RUNS / new))


@pytest.fixture(scope="module")
def ckpt():
    """activation checkpointing on -> off (labels: -36% step; SUMMARY.txt): held work on
    both sides, launch overhead and host work."""
    return diff("memory/ckpt_on", "memory/ckpt_off")


def test_the_parts_read_as_analyze_names_them_the_json_keeps_its_keys(ckpt):
    keys = set(ckpt.tables["diff_parts"]["part"])
    assert {"cpu_launch", "host_work", "idle_other", "compute"} <= keys
    text, md = diff_to_text(ckpt), diff_to_text(ckpt, markdown=True)
    html = unescape(diff_html(ckpt))
    for out in (text, md, html):
        for key in KEYS:
            assert key not in out
        for key in keys:
            assert LABELS[key] in out
    rows = {line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ")}
    assert {LABELS[k] for k in keys} <= rows
    assert {r["part"] for r in diff_to_json(ckpt)["diff_parts"]} == keys


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "->".join(p))
@pytest.mark.parametrize("columns", [80, 60])
def test_the_text_fits_the_terminal_with_names_left_aligned(profkit_main, pair, columns):
    proc = profkit_main("diff", *(RUNS / p for p in pair), "--workers", "1", "--no-cache",
                        env={"COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # a path is never broken (as in analyze's header): it may be a line's one long word
    too_long = [x for x in lines if len(x) > columns
                and not re.fullmatch(r"(profkit diff:)? *\S*samples/runs/\S+( ->)?", x)]
    assert not too_long
    head = next(i for i, x in enumerate(lines) if x.startswith("Where the step time changed"))
    table = lines[head + 1:lines.index("", head)]
    rows = [x for x in table if x.strip().split("  ")[0] in LABELS.values()
            or x.strip().startswith(("pipeline bubble", "communication", "transfer"))]
    assert len(rows) >= 3
    for row in rows:  # each name starts at the table's indent, as analyze's tables do
        assert row.startswith("  ") and row[2] != " "


def test_a_pipe_gets_100_columns(profkit_main):
    proc = profkit_main("diff", RUNS / "parallel/pipeline_m4", RUNS / "parallel/pipeline_m16",
                        "--workers", "1", "--no-cache", env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    assert max(map(len, proc.stdout.splitlines())) <= 100
    assert "VERDICT: improved: median step" in proc.stdout


def _decimals(cell: str) -> int:
    return len(cell.split(".")[1]) if "." in cell else 0


def test_markdown_numbers_have_the_precision_their_size_needs(ckpt):
    md = diff_to_text(ckpt, markdown=True)
    assert not re.search(r"\d\.\d{4,}", md)  # never 0.06288 beside 0.001685
    tables = {}
    for block in md.split("### ")[1:]:
        title, *lines = block.splitlines()
        rows = [[c.strip() for c in x.strip("|").split("|")] for x in lines if x.startswith("| ")]
        tables[title] = (rows[0], rows[1:])
    checked = 0
    for header, rows in tables.values():
        for name, cell in ((h, c) for row in rows for h, c in zip(header, row)):
            if name.endswith(" ms"):
                size = abs(float(cell))
                assert _decimals(cell) == (3 if size < 10 else 2 if size < 100 else 1), (name, cell)
                checked += 1
    assert checked > 50
    header, rows = next(t for title, t in tables.items() if title.startswith("Where the step"))
    shares = {h: [float(r[header.index(h)]) for r in rows] for h in ("base %", "new %")}
    for side in shares.values():  # the parts are the whole step
        assert sum(side) == pytest.approx(100, abs=0.3)
    # launch overhead's share as analyze gives it for each run (its rank table, in %)
    launch = next(i for i, r in enumerate(rows) if r[0] == "launch overhead")
    for side, run in (("base %", "memory/ckpt_on"), ("new %", "memory/ckpt_off")):
        ranks = analysed(RUNS / run).table("rank_breakdown")
        assert shares[side][launch] == pytest.approx(100 * float(ranks["cpu_launch"].iloc[0]), abs=0.5)


def _active_steps(run: str) -> int:
    return json.loads((RUNS / run / "run.json").read_text())["profiler"]["active"]


def test_the_gate_says_it_could_not_judge_without_an_interval(profkit_main):
    """same_compute a -> b: the same workload twice (SUMMARY: 16.94 and 17.62 ms), 3 steps
    recorded a side: too few for an interval, so the gate cannot judge a 5% slowdown."""
    a, b = "pairs/same_compute/a", "pairs/same_compute/b"
    n = (_active_steps(a), _active_steps(b))
    assert n == (3, 3)
    proc = profkit_main("diff", RUNS / a, RUNS / b, "--workers", "1", "--no-cache", "--fail-if-slower", "5")
    assert proc.returncode == 0, proc.stderr
    assert (f"--fail-if-slower 5: passed (could not judge: {n[0]} and {n[1]} steady steps, "
            "too few for an interval (4 per side)") in proc.stderr
    assert "at least" not in proc.stderr and "(unchanged;" not in proc.stderr


def test_the_gate_says_another_workload_is_not_judged(profkit_main):
    proc = profkit_main("diff", RUNS / "why/gpt_4l", RUNS / "why/gpt_6l", "--workers", "1", "--no-cache",
                        "--fail-if-slower", "5")
    assert proc.returncode == 0, proc.stderr
    assert "passed (not comparable, not judged: parameter shapes differ: 4 vs 6 blocks" in proc.stderr
    assert "at least" not in proc.stderr


def test_the_gate_that_passes_an_interval_names_it(profkit_main):
    """straggler_sleep backwards: +16% per step with 10+ steps a side (an interval), under
    the 50% asked."""
    proc = profkit_main("diff", RUNS / "pairs/straggler_sleep/after",
                        RUNS / "pairs/straggler_sleep/before", "--workers", "1", "--no-cache",
                        "--fail-if-slower", "50")
    assert proc.returncode == 0, proc.stderr
    said = re.search(r"passed \(regressed, \+([\d.]+)% per step; 95% interval \+([\d.]+)% to "
                     r"\+([\d.]+)% per step, not above 50%\)", proc.stderr)
    assert said, proc.stderr
    change, lo, hi = map(float, said.groups())
    assert lo < change < hi < 50
