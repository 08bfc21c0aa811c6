"""The Overview's part legend and its two breakdown charts follow the text report's rule for
optional parts (analyzers/parts.py: ``optional``): the pipeline bubble only where some rank
has time in it. Before, every run's legend listed "pipeline bubble" (issue 42's gaps)."""

from pathlib import Path

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.dashboard import ids
from profkit.dashboard.pages import overview

from tests.dashboard.test_loading import text_of
from tests.realruns import sample_labels

RUNS = Path(__file__).resolve().parents[2] / "samples" / "runs"
LABELS = sample_labels(RUNS / "parallel" / "SUMMARY.txt")
BUBBLE = "pipeline bubble (a stage waits for its neighbours)"


def nodes(page, wanted) -> list:
    """The components of ``page`` for which ``wanted(node)``, in page order (not inside
    one another)."""
    if isinstance(page, (list, tuple)):
        return [n for one in page for n in nodes(one, wanted)]
    if wanted(page):
        return [page]
    kids = getattr(page, "children", None)
    kids = kids if isinstance(kids, (list, tuple)) else [kids] if kids is not None else []
    return [n for kid in kids for n in nodes(kid, wanted)]


def legends(page) -> list[list[str]]:
    """The chips of each chart legend (``div.chips`` in a card with a chart's slot) in
    ``page``, in page order."""
    slots = (ids.RANK_BARS_SLOT, ids.RANK_DETAIL_SLOT)
    cards = nodes(page, lambda n: getattr(n, "className", None) == "card" and any(
        getattr(kid, "id", None) in slots for kid in n.children))
    return [[text_of(chip).strip() for chip in chips.children] for card in cards
            for chips in nodes(card, lambda n: getattr(n, "className", None) == "chips")]


@pytest.mark.parametrize("name", ["tp_mlp", "pipeline_m4"])
def test_the_bubble_is_in_the_legend_and_charts_only_of_a_pipeline(name):
    # the workload's own label, not profkit's: a 4-stage GPipe pipeline, or tensor parallel
    is_pipeline = LABELS[name]["case"] == "pipeline"
    assert is_pipeline == (name == "pipeline_m4")
    a = analyze_run(RUNS / "parallel" / name, cache=False, workers=1)
    body = overview.body(a, "key")
    found = legends(body)
    assert len(found) == 2  # under the per-rank bars and under one rank's steps
    for chips in found:
        assert (BUBBLE in chips) == is_pipeline
        assert chips[0] == "compute" and "launch overhead" in chips
    bars, _heatmap, detail = overview.charts(a)
    for slot in (bars, detail):
        graph, = nodes(slot, lambda n: type(n).__name__ == "Graph")
        names = [t.name for t in graph.figure.data]
        assert names == found[0]  # the chart draws what its legend names, in that order
