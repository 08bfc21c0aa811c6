"""Reports of many ranks stay readable: a spread instead of a row per rank, repeats folded."""

from pathlib import Path

from profkit.analyzers.executor import analyze_run
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.report import render, sections

from profkit.trace.synthetic import make_run

SOURCE = (Path(__file__).resolve().parents[2] / "samples" / "runs" / "zoo" / "balanced"
          / "traces" / "rank0.pt.trace.json.gz")


def test_rank_ranges():
    assert rank_ranges([5, 0, 1, 2, 3, 7, 8]) == "0-3,5,7-8"
    assert rank_ranges([]) == ""
    assert rank_ranges([4]) == "4"


def test_many_ranks_get_a_spread_and_folded_findings(tmp_path, monkeypatch):
    make_run(SOURCE, tmp_path / "run", 8, group_size=4, straggler=2, seed=5)
    analysis = analyze_run(tmp_path / "run", workers=1)
    per_rank = analysis.table("rank_breakdown")
    monkeypatch.setattr(sections, "MAX_RANK_ROWS", 4)
    text = render.to_text(analysis)
    # The spread rows carry the min / median / max over ranks, computed independently here.
    step = per_rank["step_time_ms"]
    block = text.split("Step time by part")[1].split("\n\n")[0].splitlines()
    [min_line] = [ln for ln in block if ln.strip().startswith("min ")]
    [max_line] = [ln for ln in block if ln.strip().startswith("max ")]
    assert f"{step.min():.1f}" in min_line and f"{step.max():.1f}" in max_line
    assert max_line.split()[-1] == str(int(per_rank.loc[step.idxmax(), "rank"]))
    # Every per-rank finding kind is printed once, naming the other ranks it also holds for.
    kinds = {(f.category, f.severity, f.recommendation) for f in analysis.findings
             if f.rank is not None and f.severity != "info"}
    folded = [g for g in render.grouped_findings(analysis)
              if g[0].rank is not None and g[0].severity != "info"]
    assert kinds and len(folded) == len(kinds)
    for f, others in folded:
        same = sorted(g.rank for g in analysis.findings
                      if (g.category, g.severity, g.recommendation)
                      == (f.category, f.severity, f.recommendation))
        assert [f.rank, others] == [same[0], rank_ranges(same[1:])]


def test_the_tables_a_finding_points_at_stay_short_for_many_ranks(tmp_path, monkeypatch):
    import numpy as np
    from profkit.analyzers import units

    make_run(SOURCE, tmp_path / "run", 8, group_size=4, seed=7)
    analysis = analyze_run(tmp_path / "run", workers=1)
    from profkit.analyzers.report import memory_sections

    for module in (sections, memory_sections):
        monkeypatch.setattr(module, "MAX_RANK_ROWS", 4)
    shown = {s.title.split(" (")[0]: s for s in sections.sections(analysis)}
    assert {"Top kernels", "Efficiency", "Collectives", "Top CPU ops"} <= set(shown)
    assert all(len(s.table) <= sections.TOP_ROWS for s in shown.values())
    # past MAX_RANK_ROWS the efficiency table is the spread over ranks, computed here anew
    eff = analysis.table("efficiency")
    spread = shown["Efficiency"].table.set_index("over ranks")
    assert list(spread.index) == ["min", "median", "max"]
    tflops = eff["achieved_tflops"].to_numpy(np.float64)
    assert spread.loc["max", "TFLOP/s"] == units.tflops(tflops.max())
    assert spread.loc["min", "GPU busy"] == units.pct(eff["gpu_util"].min())
    # one row per collective kind and size, not per process group or rank
    coll = analysis.table("collectives")
    assert len(shown["Collectives"].table) == len(coll.groupby(["collective", "bytes",
                                                                 "group_size"]))
    assert shown["Collectives"].table["count"].sum() == len(coll)
    text = render.to_text(analysis)
    assert "Efficiency (spread over 8 ranks):" in text and "Collectives (matched" in text
