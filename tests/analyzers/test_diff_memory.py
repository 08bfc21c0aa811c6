"""profkit diff reports the change of peak memory beside the change of time.

samples/runs/memory (1 x H200, SUMMARY.txt): the same GPT at batch 32 and 64, each step
labelled by the workload with torch.cuda.max_memory_allocated() and memory_reserved(). The
expected change is worked out from those labels, not from profkit: the steady steps' peak
allocated 5,296,850,944 -> 9,697,986,560 bytes (+83.1%), reserved 5,429,526,528 ->
10,452,205,568 (+92.5%). A side without [memory] events (the same trace with them taken out:
a capture without profile_memory=True) gets no memory line at all, not a zero change."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from profkit.analyzers.compare.diff import diff_analyses
from profkit.analyzers.compare.memory import memory_table
from profkit.analyzers.report.diff_text import diff_to_json, diff_to_text
from profkit.analyzers.report.html import diff_html

from tests.analysed import analysed
from tests.conftest import REPO
from tests.memory_samples import MEMORY, labels, steady_peak, without_memory_events


@pytest.fixture(scope="module")
def b32_b64():
    return diff_analyses(analysed(MEMORY / "gpt_b32"), analysed(MEMORY / "gpt_b64"))


def test_b32_to_b64_reads_the_labelled_peaks_and_their_change(b32_b64):
    mem = b32_b64.verdict["memory"]
    for kind in ("allocated", "reserved"):
        base = steady_peak("gpt_b32", f"peak_{kind}_bytes")
        new = steady_peak("gpt_b64", f"peak_{kind}_bytes")
        assert mem[f"base_peak_{kind}_bytes"] == base
        assert mem[f"new_peak_{kind}_bytes"] == new
        assert mem[f"{kind}_change_frac"] == pytest.approx(new / base - 1)
    assert mem["allocated_change_frac"] == pytest.approx(0.831, abs=0.001)  # the +83% asked
    # the step time beside it: the labelled medians 18.77 -> 31.73 ms, within the profiler
    assert mem["base_step_ms"] == pytest.approx(labels()["gpt_b32"]["median_step_ms"], rel=0.02)
    assert mem["new_step_ms"] == pytest.approx(labels()["gpt_b64"]["median_step_ms"], rel=0.02)


def test_the_text_json_and_html_carry_the_memory_line(b32_b64):
    text = diff_to_text(b32_b64)
    # the MEMORY paragraph, wrapped at the width like the verdict: its lines joined
    paragraph = text.split("\nMEMORY: ", 1)[1].split("\n\n", 1)[0]
    line = "MEMORY: " + " ".join(x.strip() for x in paragraph.splitlines())
    assert "allocated 5.30 -> 9.70 GB (+4.40 GB, +83.1%)" in line
    assert "reserved 5.43 -> 10.45 GB (+5.02 GB, +92.5%)" in line
    assert "beside the median step" in line
    md = diff_to_text(b32_b64, markdown=True)
    assert "**Memory:** peak memory (largest rank): allocated 5.30 -> 9.70 GB" in md
    doc = json.loads(json.dumps(diff_to_json(b32_b64)))
    assert doc["verdict"]["memory"]["new_peak_allocated_bytes"] == 9_697_986_560
    [row] = doc["verdict"]["memory"]["ranks"]
    assert (row["rank"], row["device"]) == (0, 0)
    assert row["delta_allocated_gb"] == pytest.approx((9_697_986_560 - 5_296_850_944) / 1e9)
    assert "<b>Memory:</b> peak memory (largest rank): allocated 5.30 -&gt; 9.70 GB" \
        in diff_html(b32_b64)


@pytest.mark.parametrize("side", ["base", "new"])
def test_a_side_without_memory_events_gets_no_memory_line(tmp_path, side):
    bare = analysed(without_memory_events(MEMORY / "gpt_b32", tmp_path / "bare"))
    assert bare.table("memory_ranks").empty
    full = analysed(MEMORY / "gpt_b64")
    d = diff_analyses(bare, full) if side == "base" else diff_analyses(full, bare)
    assert d.verdict["verdict"] is not None  # the time is still compared
    assert "memory" not in d.verdict
    assert "MEMORY" not in diff_to_text(d) and "Memory" not in diff_to_text(d, markdown=True)
    doc = diff_to_json(d)
    assert "memory" not in doc["verdict"]


def _ranks(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "device", "peak_allocated_bytes",
                                       "peak_reserved_bytes"])


def test_memory_table_pairs_the_ranks_both_sides_have():
    base = _ranks([(0, 0, 2_000_000_000, 4_000_000_000), (1, 1, 1_000_000_000, 1_000_000_000)])
    new = _ranks([(1, 1, 1_500_000_000, 3_000_000_000), (2, 2, 9, 9)])  # rank 0 gone, 2 new
    table = memory_table(base, new)
    assert table[["rank", "device"]].values.tolist() == [[1, 1]]
    row = table.iloc[0]
    assert (row["base_allocated_gb"], row["new_allocated_gb"]) == (1.0, 1.5)
    assert row["delta_allocated_gb"] == pytest.approx(0.5)
    assert row["allocated_change_frac"] == pytest.approx(0.5)
    assert row["reserved_change_frac"] == pytest.approx(2.0)


def test_several_ranks_get_a_per_rank_table_beside_the_run_line():
    """zoo/balanced -> zoo/straggler (2 ranks each): one row per rank, each side's peak the
    allocator's highest total of that rank's trace in the used steps; the run's line reads
    the largest rank of each side."""
    base, new = analysed(REPO / "samples/runs/zoo/balanced"), \
        analysed(REPO / "samples/runs/zoo/straggler")
    d = diff_analyses(base, new)
    assert "diff_memory" not in d.tables  # those are the time's attribution, delta_ms each
    table = pd.DataFrame(d.verdict["memory"]["ranks"]).set_index("rank")
    assert table.index.tolist() == [0, 1]
    for side, a in (("base", base), ("new", new)):
        peaks = a.table("memory_ranks").set_index("rank")["peak_allocated_bytes"]
        assert (table[f"{side}_allocated_gb"] * 1e9).round().astype(int).tolist() == \
            peaks.tolist()
        assert d.verdict["memory"][f"{side}_peak_allocated_bytes"] == peaks.max()
    text = diff_to_text(d)
    block = text.split("Peak memory per rank")[1].splitlines()
    assert [line.split()[0] for line in block[2:4]] == ["0", "1"]
