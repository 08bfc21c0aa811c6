"""Per-panel error boundaries: a panel that fails shows a short error naming the cause and
the others of its page still render."""

from dash import dcc, html
from profkit.dashboard.figures import charts as figures
from profkit.dashboard.pages import frame
from profkit.dashboard.pages import overview as page_overview
from profkit.dashboard.server.registry import RunRegistry
from profkit.dashboard.server.results import ResultCache

from tests.dashboard.conftest import STRAGGLER
from tests.dashboard.test_loading import text_of


def test_a_failing_panel_names_its_cause_and_the_others_render(monkeypatch):
    def broken_heatmap(_steps, *_):
        raise RuntimeError("heatmap broke")

    monkeypatch.setattr(figures, "step_heatmap", broken_heatmap)
    results = ResultCache(RunRegistry([STRAGGLER], []))
    (entry,) = results.registry.entries()
    page = page_overview.layout(results, entry.key)
    bars, heatmap, detail = page_overview.charts(results.analysis(entry.key))  # sent after it
    text = text_of(page) + text_of(heatmap)
    assert "Step time, rank x step could not be drawn: RuntimeError: heatmap broke" in text
    assert "rank 1 is a straggler" in text  # the panels beside it
    assert "Evidence & recommendations" in text and "Could not analyze" not in text
    assert [type(c).__name__ for c in (bars.children, detail.children)] == ["Graph", "Graph"]


def test_a_panel_whose_value_json_cannot_carry_fails_in_its_panel():
    ok = frame.panel("fine", lambda: html.P("drawn"))
    too_big = frame.panel("big", lambda: dcc.Store(id="s", data=10**30))  # beyond int64
    assert text_of(ok) == "drawn"
    assert "panel-error" in too_big.className and "could not be drawn" in text_of(too_big)
