"""In headless chromium, on the session's dashboard server: the Memory page of an H200 run
captured with profile_memory=True draws allocated and reserved with the labelled peak
starred, the device's capacity and the step bands; the Overview's tile reads the same peak;
a run without [memory] events gets one line saying how to capture them, no chart.

Expected values from the workload's labels and the raw trace (tests/memory_samples.py)."""

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

from tests.analysed import analysed
from tests.memory_samples import MEMORY, raw_trace, steady_peak

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
B32 = KEYS.get("memory/gpt_b32")
BARE = KEYS.get("pairs/cuda_graphs/after")  # its trace has no [memory] events
pytestmark = pytest.mark.skipif(B32 is None or BARE is None, reason="no bundled sample runs")
NO_MEMORY = "no memory events in this trace (capture with profile_memory=True)"

# the drawn figure as plotly.js holds it (its data decoded): its lines' highest y, the star, the shapes
FIGURE_JS = """
gid => {
    const g = document.getElementById(gid).querySelector('.js-plotly-plot');
    const lines = g._fullData.filter(t => t.mode === 'lines');
    const star = g._fullData.find(t => t.mode === 'markers');
    return {
        lines: Object.fromEntries(lines.map(t => [t.name, Math.max(...Array.from(t.y))])),
        star: star ? Array.from(star.y) : null,
        hlines: (g.layout.shapes || []).filter(s => s.type === 'line').map(s => s.y0),
        bands: (g.layout.shapes || []).filter(s => s.type === 'rect').length,
    };
}
"""


def test_memory_page_draws_the_labelled_peak_capacity_and_steps(page):
    page.goto(f"{page.base}/run/{B32}/memory")
    page.wait_for_selector("#m-graph .main-svg")
    drawn = page.evaluate(FIGURE_JS, "m-graph")
    alloc_gb = steady_peak("gpt_b32", "peak_allocated_bytes") / 1e9
    reserved_gb = steady_peak("gpt_b32", "peak_reserved_bytes") / 1e9
    assert drawn["lines"] == {"rank 0 allocated": pytest.approx(alloc_gb),
                              "rank 0 reserved": pytest.approx(reserved_gb)}
    assert drawn["star"] == [pytest.approx(alloc_gb)]
    capacity = raw_trace("gpt_b32")["deviceProperties"][0]["totalGlobalMem"]
    assert drawn["hlines"] == [pytest.approx(capacity / 1e9)]
    assert drawn["bands"] >= 3  # the recorded steps
    text = page.locator("#m-graph").text_content()
    assert "peak 5.30 GB" in text and "capacity 150.1 GB" in text
    # the per-rank peaks, in GB, one row
    page.locator("#m-ranks .ag-row").first.wait_for()
    assert page.locator("#m-ranks .ag-row").count() == 1
    assert f"\n{alloc_gb:.3f}\n{reserved_gb:.2f}\n" in page.locator("#m-ranks").inner_text()
    assert page.locator(".tab.active").inner_text() == "Memory"
    # the y axis up to the capacity first; the button fits it to the data (reserved peak)
    top = "gid => document.getElementById(gid).querySelector('.js-plotly-plot')" \
        "._fullLayout.yaxis.range[1]"
    assert page.evaluate(top, "m-graph") == pytest.approx(1.05 * capacity / 1e9)
    page.locator("#m-graph .updatemenu-button").filter(has_text="up to the data").click()
    page.wait_for_function(f"({top})('m-graph') < 10")
    assert page.evaluate(top, "m-graph") == pytest.approx(1.05 * reserved_gb)


def test_memory_page_shows_what_is_live_at_the_peak_or_says_it_is_not_available(page):
    page.goto(f"{page.base}/run/{B32}/memory")
    live = page.locator("#m-live")
    live.wait_for()
    measured = analysed(MEMORY / "gpt_b32").table("memory_live")
    if measured.empty:
        assert "not available" in live.inner_text()
    else:  # the analysis measures it: its largest op is the first row
        top = measured.sort_values("live_bytes", ascending=False).iloc[0]
        live.locator(".ag-row").first.wait_for()
        assert str(top["op"])[:20] in live.locator(".ag-row").first.inner_text()


def test_a_run_without_memory_events_says_so_on_the_page_and_the_tile(page):
    page.goto(f"{page.base}/run/{BARE}/memory")
    none = page.locator("#m-none")
    none.wait_for()
    assert none.inner_text() == NO_MEMORY
    assert page.locator("#m-graph").count() == 0 and page.locator("#m-ranks").count() == 0
    page.goto(f"{page.base}/run/{BARE}")
    page.locator("#m-tile").wait_for()
    assert NO_MEMORY in page.locator("#m-tile").inner_text()


def test_the_overview_tile_reads_the_peak_of_the_capacity_and_the_headroom(page):
    page.goto(f"{page.base}/run/{B32}")
    tile = page.locator("#m-tile")
    tile.wait_for()
    text = tile.inner_text()
    capacity = raw_trace("gpt_b32")["deviceProperties"][0]["totalGlobalMem"]
    reserved = steady_peak("gpt_b32", "peak_reserved_bytes")
    assert f"{steady_peak('gpt_b32', 'peak_allocated_bytes') / 1e9:.1f} / " \
        f"{capacity / 1e9:.1f} GB" in text
    assert f"{(capacity - reserved) / 1e9:.1f} GB" in text and "~33x" in text


def test_compare_page_gives_the_change_of_peak_memory(page):
    """gpt_b32 -> gpt_b64: the labels' allocated peaks 5,296,850,944 -> 9,697,986,560 B."""
    page.goto(f"{page.base}/compare?base={B32}&new={KEYS['memory/gpt_b64']}")
    line = page.locator(".diff-memory")
    line.wait_for()
    change = steady_peak("gpt_b64", "peak_allocated_bytes") / \
        steady_peak("gpt_b32", "peak_allocated_bytes") - 1
    assert f"allocated 5.30 -> 9.70 GB (+4.40 GB, {change:+.1%})" in line.inner_text()
    assert "+83.1%" in line.inner_text()
