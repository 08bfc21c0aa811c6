"""The HTML and Markdown reports carry the allocator's peak memory as the text report does:
the HTML page and the notebook view a memory line under the verdict and the Memory section,
Markdown the section. Values from the workload's labels and the raw trace's device
properties (tests/memory_samples.py); a run without [memory] events has neither."""

import pytest
from profkit.analyzers.report.html import analysis_html
from profkit.analyzers.report.html_page import to_html
from profkit.analyzers.report.render_text import to_markdown

from tests.analysed import analysed
from tests.conftest import REPO
from tests.memory_samples import MEMORY, raw_trace, steady_peak, without_memory_events


def expected_line() -> str:
    alloc = steady_peak("gpt_b32", "peak_allocated_bytes")
    reserved = steady_peak("gpt_b32", "peak_reserved_bytes")
    capacity = raw_trace("gpt_b32")["deviceProperties"][0]["totalGlobalMem"]
    return (f"peak memory: {alloc / 1e9:.2f} GB allocated, {reserved / 1e9:.2f} GB reserved "
            f"of {capacity / 1e9:.1f} GB ({reserved / capacity:.1%}), rank 0")


def test_the_expected_line_is_the_labels():
    assert expected_line() == ("peak memory: 5.30 GB allocated, 5.43 GB reserved of 150.1 GB "
                               "(3.6%), rank 0")


def test_html_page_and_notebook_have_the_memory_line_and_section():
    a = analysed(MEMORY / "gpt_b32")
    page = to_html(a)
    assert f"<b>Memory:</b> {expected_line()}; the batch could grow about 33x" in page
    assert "<h3>Memory (per rank)</h3>" in page
    assert "<td>5.3 GB</td><td>5.4 GB</td><td>150.1 GB</td><td>3.6%</td>" in page
    assert f"<b>Memory:</b> {expected_line()}" in analysis_html(a)


def test_markdown_has_the_memory_section():
    md = to_markdown(analysed(MEMORY / "gpt_b32"))
    assert "### Memory (per rank)" in md
    assert "| 0 | 0 | 5.3 GB | 5.4 GB | 150.1 GB | 3.6% | 0.8 GB | 4.5 GB |" in md


def test_several_ranks_name_the_highest():
    page = to_html(analysed(REPO / "samples/runs/zoo/straggler"))
    assert "(the highest of 2 rank-devices)" in page


@pytest.mark.parametrize("render", [to_html, to_markdown, analysis_html])
def test_a_run_without_memory_events_has_no_memory_line(tmp_path, render):
    a = analysed(without_memory_events(MEMORY / "gpt_b32", tmp_path / "bare"))
    out = render(a)
    assert "Memory" not in out and "peak memory" not in out
    assert "compute bound" in out  # the rest of the report is there


def test_a_line_without_the_devices_memory_gives_the_peaks_alone():
    from profkit.analyzers.report.memoryline import memory_line

    a = analysed(MEMORY / "gpt_b32")
    ranks = a.table("memory_ranks").copy()
    ranks[["capacity_bytes", "batch_headroom_x"]] = float("nan")
    a.tables["memory_ranks"] = ranks
    assert memory_line(a) == "peak memory: 5.30 GB allocated, 5.43 GB reserved, rank 0"


def test_a_line_near_capacity_says_nothing_of_growing_the_batch():
    from profkit.analyzers.report.memoryline import memory_line

    a = analysed(MEMORY / "gpt_b32")
    a.tables["memory_ranks"] = a.table("memory_ranks").assign(batch_headroom_x=1.05)
    assert memory_line(a) == expected_line()
