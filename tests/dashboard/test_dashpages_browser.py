"""In headless chromium, on the real dashboard over the bundled runs (issue 42, item 8):
wide tables show every column, a table filtered to nothing shows "No Rows To Show" whole,
a single-GPU run's Communication page says there is none, the roofline labels its roofs,
why/recompile's MFU reads "-", and the Overview links to the per-rank breakdown table."""

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
pytestmark = pytest.mark.skipif("zoo/straggler" not in KEYS, reason="no bundled sample runs")

# every grid's columns against its own box: the last header's right edge inside the grid,
# and nothing to scroll sideways
COLUMNS_JS = """() => [...document.querySelectorAll('.profkit-grid')].map(g => {
    const box = g.getBoundingClientRect();
    const heads = [...g.querySelectorAll('.ag-header-row-column .ag-header-cell')];
    const right = Math.max(...heads.map(h => h.getBoundingClientRect().right));
    const v = g.querySelector('.ag-center-cols-viewport');
    return [g.id, heads.length, right - box.right, v.scrollWidth - v.clientWidth];
})"""


def test_wide_tables_show_their_last_columns(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/tables")
    page.wait_for_selector("#t-nvml .ag-row")
    page.wait_for_selector("#t-rank_breakdown .ag-row")
    grids = page.evaluate(COLUMNS_JS)
    by_id = {g[0]: g for g in grids}
    assert by_id["t-nvml"][1] >= 16 and by_id["t-rank_breakdown"][1] >= 12  # wide ones
    cut = [g for g in grids if g[2] > 1 or g[3] > 1]
    assert cut == []  # before: rank_breakdown, efficiency, collectives, launches, nvml ...


def test_an_empty_table_shows_no_rows_to_show_whole(page):
    """parallel/pipeline_m4: four pipeline stages, point-to-point only: no rank arrives last
    at a collective, so its stragglers table has no rows."""
    page.goto(f"{page.base}/run/{KEYS['parallel/pipeline_m4']}/comms")
    grid = page.locator("#c-stragglers")
    overlay = grid.locator(".ag-overlay-no-rows-center")
    overlay.wait_for(state="attached")
    assert overlay.inner_text() == "No Rows To Show"
    text, body = overlay.bounding_box(), grid.locator(".ag-body").bounding_box()
    assert text is not None and text["height"] >= 14  # one line of 13 px text
    # the whole line inside the grid's body (before: a body of 0 px clipped it)
    assert body["y"] <= text["y"] and text["y"] + text["height"] <= body["y"] + body["height"] + 1


def test_single_gpu_run_communication_page_says_there_is_none(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/compute']}/comms")
    page.wait_for_selector("#c-none")
    assert "single-rank run" in page.locator("#c-none").inner_text()
    assert page.locator("#c-waits").count() == 0 and page.locator(".profkit-grid").count() == 0


def test_roofline_labels_each_roof_once(page):
    page.goto(f"{page.base}/run/{KEYS['memory/gpt_b32']}/kernels")
    page.wait_for_selector("#k-roofline .main-svg")
    text = page.locator("#k-roofline").text_content()
    for label in ("989.4 TFLOP/s", "66.9 TFLOP/s", "HBM 4800 GB/s"):
        assert text.count(label) == 1, label
    assert "without FLOPs" in text


def test_recompile_overview_mfu_is_a_dash(page):
    page.goto(f"{page.base}/run/{KEYS['why/recompile']}")
    page.wait_for_selector("#step-heatmap .main-svg")
    stats = page.locator(".stats").inner_text()
    assert "MFU" in stats and "0%" not in stats
    mfu = page.locator(".stat", has_text="MFU").locator(".stat-value").inner_text()
    assert mfu == "-"


def test_overview_links_the_rank_breakdown_table(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    page.locator("#rank-table-link").click()
    page.wait_for_selector("#t-rank_breakdown")
    assert page.url.endswith("/tables#table-rank_breakdown")


# each lane label's left edge against the figure's: a label cut by the margin starts left of it
TICKS_JS = """() => {
    const svg = document.querySelector('#tl-graph .main-svg').getBoundingClientRect();
    return [...document.querySelectorAll('#tl-graph .yaxislayer-above .ytick text')]
        .map(t => [t.textContent, t.getBoundingClientRect().left - svg.left]);
}"""


def test_timeline_cpu_thread_labels_are_whole(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/timeline")
    page.wait_for_selector("#tl-graph .main-svg")
    page.get_by_label("CPU threads").check()
    page.wait_for_function("document.querySelector('#tl-graph').textContent.includes('depth 1')")
    page.wait_for_timeout(500)
    ticks = page.evaluate(TICKS_JS)
    assert any("(pt_autograd_0) · depth 0" in t for t, _ in ticks)
    assert [t for t, left in ticks if left < 0] == []  # before: 'rank 1 · thread 1099 (...' cut


def test_timeline_search_by_name_gives_the_matches_total_time(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/timeline")
    page.wait_for_selector("#tl-graph .main-svg")
    page.locator("#tl-search").fill("nccl")
    page.locator("#tl-search").press("Enter")
    page.wait_for_function("document.querySelector('#tl-found').textContent.length > 0")
    text = page.locator("#tl-found").inner_text()
    assert text.startswith('"nccl" on rank 1 (straggler), rank 0: GPU ')
    assert " ms in the whole run; in this window: GPU " in text


def test_timeline_draws_launch_arrows_with_the_cpu_threads(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/timeline")
    page.wait_for_selector("#tl-graph .main-svg")
    page.get_by_label("CPU threads").check()
    page.wait_for_function("document.querySelector('#tl-info').textContent.includes('arrows')")
    names = page.evaluate("() => document.querySelector('#tl-graph .js-plotly-plot')"
                          "._fullData.map(d => d.name)")
    assert "launch -> GPU" in names


# every header's text against its own box: a word wider than its column is cut ("..."),
# since headers wrap between words only
CUT_HEADERS_JS = """() => [...document.querySelectorAll('.profkit-grid .ag-header-cell-text')]
    .filter(t => t.scrollWidth > t.clientWidth + 1).map(t => t.textContent)"""


@pytest.mark.parametrize("where", ["compare", "tables"])
def test_grid_headers_are_not_cut(page, where):
    """Compare's "base (ms/step/rank)" was cut to "(ms/step/r..." (its column 95 px, the
    word 100 px): a column is as wide as its header's longest word."""
    if where == "compare":
        page.goto(f"{page.base}/compare?base={KEYS['zoo/balanced']}&new={KEYS['zoo/straggler']}")
        page.wait_for_selector("#cmp-kernels .ag-row")
    else:
        page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/tables")
        page.wait_for_selector("#t-nvml .ag-row")
    heads = page.locator(".profkit-grid .ag-header-cell-text").all_inner_texts()
    assert any("(ms/step/rank)" in h for h in heads) if where == "compare" else len(heads) > 40
    assert page.evaluate(CUT_HEADERS_JS) == []
