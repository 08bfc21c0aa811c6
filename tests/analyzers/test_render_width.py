"""The text report fits the terminal: ``profkit analyze RUN`` of every bundled run at 100
columns (the width of a pipe) has no longer line, except a word that is longer itself (a
path); findings wrap at spaces; wide tables fit by two-line headers, cut names or a split;
each straggler fact is said once; the parts have the names the other reports give them."""

from __future__ import annotations

import os

import pytest
from profkit.analyzers.report.render import to_markdown, to_text

from profkit.cli import main
from tests.analysed import analysed
from tests.conftest import REPO

RUNS = REPO / "samples" / "runs"
BUNDLED = sorted({p.parent for p in RUNS.rglob("run.json")}
                 | {RUNS / "stock_ddp", RUNS / "stock_ddp_stack",
                    RUNS / "diagnosis" / "marker_steps"})


def too_long(text: str, width: int) -> list[str]:
    """Lines longer than ``width``, but for a line made long by a word that is itself
    unbreakable and long (a path, a URL: over half the width)."""
    return [ln for ln in text.splitlines() if len(ln) > width
            and not any(len(w) > width // 2 for w in ln.split())]


@pytest.mark.parametrize("run", BUNDLED, ids=lambda p: str(p.relative_to(RUNS)))
def test_every_bundled_run_fits_100_columns(run):
    """The report ``profkit analyze RUN`` prints into a pipe (the test below checks that
    the command prints exactly this text)."""
    text = to_text(analysed(run), 100)
    assert text.startswith(f"profkit analysis of {run}") and "VERDICT: " in text
    assert too_long(text, 100) == []


@pytest.fixture(scope="module")
def hf_trainer():
    """The bundled run with the widest tables: long kernel names, a folded link column,
    Python frames in the idle code, four findings."""
    return analysed(RUNS / "frameworks" / "hf_trainer")


@pytest.mark.parametrize("width", [60, 80, 100, 140])
def test_narrower_and_wider_terminals(hf_trainer, width):
    text = to_text(hf_trainer, width)
    assert too_long(text, width) == []
    # no word is broken by the wrapping: every word of a finding is in its message
    [straggler] = [f for f in hf_trainer.findings if f.category == "straggler"]
    start = text.index("- [critical] Rank 1 is a straggler")
    said = " ".join(text[start:text.index("\n    do:", start)].split())
    assert " ".join(straggler.message.split()) in said
    # the tables are all there: every kernel of the top ten, every part
    for part in ("compute", "communication", "transfer", "launch", "overhead", "host",
                 "data loading"):
        assert part in text
    assert "nvjet gemm 128x256 bf16" in text or width < 80


def test_a_long_path_keeps_a_line_of_its_own(hf_trainer):
    import dataclasses

    long = "/runs/" + "x" * 150 + "/my job"  # with a space: never broken there either
    skipped = [{"path": f"{long}/rank1.json", "reason": "truncated JSON " + "word " * 30}]
    a = dataclasses.replace(hf_trainer, run={**hf_trainer.run, "path": long,
                                             "skipped_files": skipped})
    lines = to_text(a, 100).splitlines()
    assert lines[0] == f"profkit analysis of {long}"  # the title stays one line
    assert lines[2] == f"skipped: {long}/rank1.json:"  # the path whole, on its line
    assert lines[3].startswith("  truncated JSON word") and len(lines[3]) <= 100
    assert too_long("\n".join(lines), 100) == []


def test_the_cli_lays_out_for_the_terminal(tmp_path, monkeypatch, capsys):
    run = RUNS / "zoo" / "straggler"
    monkeypatch.setenv("COLUMNS", "72")
    assert main(["analyze", str(run)]) == 0
    narrow = capsys.readouterr().out
    assert max(map(len, narrow.splitlines())) <= 72
    monkeypatch.delenv("COLUMNS")
    assert main(["analyze", str(run), "-o", str(tmp_path / "a.txt")]) == 0  # a file: 100
    capsys.readouterr()
    wide = (tmp_path / "a.txt").read_text()
    assert 72 < max(map(len, wide.splitlines())) <= 100
    assert wide == to_text(analysed(run), 100)  # the report the test above lays out
    assert main(["analyze", str(run)]) == 0  # the cached report of another width is not reused
    assert capsys.readouterr().out == wide


@pytest.fixture(scope="module")
def straggler():
    return analysed(RUNS / "zoo" / "straggler")


def test_each_straggler_fact_is_said_once(straggler):
    text = to_text(straggler)
    flat = " ".join(text.split())
    assert "STRAGGLER:" not in text and "evidence: others wait" not in text
    assert flat.count("last at 18 of 18 collectives") == 1
    assert flat.count("9.92 ms") == 1  # its compute against the others', in the advice
    assert flat.count("rank 1 is a straggler") + flat.count("Rank 1 is a straggler") == 2
    md = to_markdown(straggler)  # the verdict names it, the finding says why
    assert "**Straggler:**" not in md and "others wait 1.47" not in md


def test_the_parts_have_one_name_in_every_report(straggler):
    from profkit.analyzers.report.html_page import to_html

    text, md, page = to_text(straggler), to_markdown(straggler), to_html(straggler)
    for report in (text, md, page):
        assert "transfer" in report and "held work" in report and "launch overhead" in report
        assert "memcpy" not in report and "idle_other" not in report and "host_work" not in report
        assert "cpu_launch" not in report and "data_loading" not in report
    head = text[text.index("Step time by part"):].splitlines()[1:3]
    assert "transfer" in head[1] and "held" in head[0] and "work" in head[1]


def test_kernel_classes_read_as_parts():
    import pandas as pd
    from profkit.analyzers.analyze import Analysis
    from profkit.analyzers.report.sections import kernels_section

    a = analysed(RUNS / "diagnosis" / "transfer")
    assert a.verdict["summary"].startswith("transfer bound")
    # a copy kernel (a rule can make any kernel one) reads as a transfer in the table
    kernels = pd.DataFrame({"name": ["my_copy_kernel"], "cls": ["memcpy"], "count": [3],
                            "total_ns": [3e6], "share": [1.0], "rank_min_total_ns": [3e6],
                            "rank_max_total_ns": [3e6]})
    table = kernels_section(Analysis({"path": "r"}, {"summary": ""},
                                     {"top_kernels": kernels})).table
    assert list(table["class"]) == ["transfer"]


def test_wide_width_from_the_environment(monkeypatch):
    from profkit.textout import MIN_WIDTH, PIPE_WIDTH, terminal_width

    monkeypatch.delenv("COLUMNS", raising=False)
    assert terminal_width(False) == PIPE_WIDTH
    monkeypatch.setenv("COLUMNS", "132")
    assert terminal_width(False) == 132 == terminal_width(True)
    monkeypatch.setenv("COLUMNS", "20")
    assert terminal_width(True) == MIN_WIDTH
    assert os.environ["COLUMNS"] == "20"
