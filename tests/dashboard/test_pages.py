"""In headless chromium: what a run lacks is on its Runs row and on every page (the banner);
nothing on any page points off this machine or asks for anything from elsewhere; every
table a finding cites is one click away, sortable, filterable and exportable; the Overview's
breakdown chart keeps its plot area at 1024 px."""

import re
import urllib.request
from csv import reader

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry, run_key

from tests.dashboard.conftest import BAD_CHUNK, BAD_STATUS, BAD_TRACE

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
pytestmark = pytest.mark.skipif("zoo/straggler" not in KEYS, reason="no bundled sample runs")
# the only absolute URLs allowed in the DOM: XML namespace names, which are never fetched
NAMESPACES = re.compile(r"^http://www\.w3\.org/(2000/svg|1999/xlink|2000/xmlns/?)$")
# an absolute address anywhere, or one that starts the value (protocol-relative)
ABSOLUTE = re.compile(r"https?://|^\s*//", re.I)
GRAPHS = {"Runs": 0, "Tables": 0}  # pages without charts; the others have at least one
ALL_RUNS_MS = 120_000  # the Runs page analysing its few runs from nothing, under load

# Every attribute of every element (shadow roots included) as [tag, name, value].
ALL_ATTRIBUTES_JS = """
() => {
    const out = [];
    const walk = root => root.querySelectorAll("*").forEach(el => {
        for (const a of el.attributes) out.push([el.tagName, a.name, a.value]);
        if (el.shadowRoot) walk(el.shadowRoot);
    });
    walk(document);
    return out;
}
"""


def row(page, label_or_key):
    """The cells of a run's row in the Runs grid, by column, once it is analysed."""
    key = page.keys.get(label_or_key, label_or_key)
    locator = page.locator(f'.ag-row[row-id="{key}"].run-done')
    # analysed in the background, rows in view first, on a machine busy with other tests
    locator.wait_for(timeout=ALL_RUNS_MS)
    return lambda column: locator.locator(f'.ag-cell[col-id="{column}"]')


def test_runs_rows_say_how_many_ranks_were_read_and_the_gpus_used(runs_page, bad_runs,
                                                                 missing_run, sidecar_run):
    page = runs_page  # the spoiled runs and a root of one sample run of each kind checked
    page.goto(page.base + "/")
    for folder in (bad_runs["straggler-truncated"], missing_run):
        cells = row(page, run_key(folder.name, folder.resolve()))
        assert cells("status").locator(".badge").text_content() == "incomplete"  # the pill
        assert cells("ranks").inner_text() == "1 of 2"
        assert "1 of 2 ranks missing (1)" in cells("ranks").locator("span[title]").get_attribute("title")
    cells = row(page, "zoo/straggler")
    assert (cells("status").text_content(), cells("ranks").inner_text()) == ("ok", "2")
    # every rank there, two sidecars skipped: not incomplete, the files listed as notes
    cells = row(page, run_key(sidecar_run.name, sidecar_run.resolve()))
    assert cells("status").locator(".badge").count() == 0
    assert cells("ranks").inner_text() == "2"
    assert cells("status").locator(".status-ok").text_content() == "ok"
    notes = cells("status").locator(".run-notes")
    assert notes.text_content() == "2 files skipped"
    assert f"{BAD_STATUS}: unreadable rank status" in notes.get_attribute("title")
    assert f"{BAD_CHUNK}: NVML chunk skipped" in notes.get_attribute("title")
    assert cells("gpus").inner_text() == "2 x NVIDIA H200"
    # one rank on a host of two GPUs: the GPU of that rank, not the host's list
    assert row(page, "zoo/compute")("gpus").inner_text() == "1 x NVIDIA H200"
    # every run of the page analysed (or failed), each row saying so
    page.wait_for_selector("#runs-progress:has-text('runs analysed')", timeout=ALL_RUNS_MS)
    assert page.locator(".ag-row.run-done").count() + page.locator(
        ".ag-row.run-failed").count() == page.locator("a.runlink").count() == len(page.keys)


@pytest.mark.parametrize("which", ["straggler-truncated", "missing"])
def test_overview_of_a_run_missing_a_rank_says_so_above_the_verdict(page, bad_runs,
                                                                   missing_run, which):
    folder = missing_run if which == "missing" else bad_runs[which]
    page.goto(f"{page.base}/run/{run_key(folder.name, folder.resolve())}")
    banner = page.locator("#run-note")
    banner.wait_for()
    text = banner.inner_text()
    assert "1 of 2 ranks analysed: 1 missing (1)" in text and "straggler among them" in text
    assert (BAD_TRACE in text) == (which != "missing")
    assert banner.bounding_box()["y"] < page.locator("#verdict").bounding_box()["y"]
    assert "1 of 2" in page.locator(".stats").inner_text()  # the run facts
    assert page.locator("#straggler-callout").count() == 0  # rank 1 was not seen


def _pages():
    straggler = KEYS.get("zoo/straggler", "")
    run = f"/run/{straggler}"
    compare = f"/compare?base={KEYS.get('zoo/balanced')}&new={straggler}"
    return {"Runs": "/", "Overview": run, "Timeline": run + "/timeline",
            "Kernels": run + "/kernels", "Communication": run + "/comms",
            "Counters": f"/run/{KEYS.get('profkit_ddp')}/counters",
            "Memory": f"/run/{KEYS.get('memory/gpt_b32')}/memory", "Tables": run + "/tables",
            "Compare": compare}


@pytest.mark.parametrize("name, path", list(_pages().items()))
def test_nothing_on_a_page_points_off_this_machine(page, name, path):
    asked = []
    page.route("**/*", lambda route: (asked.append(route.request.url), route.continue_()))
    page.goto(page.base + path)
    page.wait_for_load_state("networkidle")
    graphs = page.locator(".js-plotly-plot")
    if GRAPHS.get(name, 1):
        graphs.first.wait_for()
    for i in range(graphs.count()):  # the modebar is drawn on hover
        graphs.nth(i).locator(".main-svg").first.wait_for()
        graphs.nth(i).hover()
    outside = [u for u in asked if not u.startswith(page.base + "/")]
    assert outside == [], f"{name} asked for {outside}"
    found = [(tag, attr, value) for tag, attr, value in page.evaluate(ALL_ATTRIBUTES_JS)
             if ABSOLUTE.search(value) and not NAMESPACES.match(value)
             and not value.startswith(page.base)]
    assert found == [], f"{name}: {found[:5]}"
    titles = page.locator(".modebar-btn").evaluate_all("els => els.map(e => e.dataset.title)")
    assert graphs.count() == 0 or "Download plot as a PNG" in titles  # the modebar is there
    assert not [t for t in titles if re.search(r"cloud|chart studio|plotly", t or "", re.I)]
    assert page.locator(".modebar a[href]").count() == 0  # no logo link either


def test_served_html_and_styles_name_nothing_outside(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    page.wait_for_selector("#verdict")
    urls = page.evaluate("() => [...document.querySelectorAll('script[src], link[href]')]"
                         ".map(e => e.src || e.href)")
    assert urls and all(u.startswith(page.base + "/") for u in urls)
    for url in [u for u in urls if ".css" in u] + [page.base + "/"]:
        text = urllib.request.urlopen(url).read().decode()
        assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), url
        assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(https?:)?//", text), url


def test_a_finding_links_to_its_table_which_sorts_filters_and_exports(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    link = page.locator("#findings a.cites", has_text="stragglers").first
    link.click()
    page.wait_for_url("**/tables#table-stragglers")
    card = page.locator("#table-stragglers")
    card.wait_for()
    page.wait_for_function(  # brought into view once drawn
        "Math.abs(document.getElementById('table-stragglers').getBoundingClientRect().top) < 5")
    table = page.locator("#t-stragglers")
    assert "others wait (ms/step)" in table.inner_text()
    for name in ("efficiency", "stream_breakdown", "compute_subclasses", "collectives",
                 "queue_depth", "nvml", "transfers", "idle_code"):
        assert page.locator(f"#table-{name} .ag-root").count() == 1, name
    assert "link peak (GB/s)" in page.locator("#t-collectives").inner_text()
    # sort the stragglers by rank, descending: rank 1 first
    rank_header = table.locator(".ag-header-cell[col-id='rank'] .ag-header-cell-label")
    rank_header.click()
    rank_header.click()
    first_rank = "#t-stragglers .ag-center-cols-container .ag-row[row-index='0'] [col-id='rank']"
    page.wait_for_function(f"document.querySelector(\"{first_rank}\").textContent === '1'")
    # filter: rank 0 only
    box = table.locator(".ag-floating-filter[col-id='rank'] input:enabled")
    box.fill("0")
    page.wait_for_function("document.querySelectorAll("
                           "'#t-stragglers .ag-center-cols-container .ag-row').length === 1")
    csv = export_csv(page, "t-stragglers")
    assert csv[0].startswith("rank,straggler,arrived last") and len(csv) == 2  # the filtered row
    assert csv[1].startswith("0,")


def export_csv(page, grid_id: str) -> list[str]:
    """The lines of the CSV that a grid's export button downloads."""
    with page.expect_download() as info:
        page.locator(f"button.export[data-csv-grid='{grid_id}']").click()
    assert info.value.suggested_filename == f"{grid_id}.csv"
    return open(info.value.path(), encoding="utf-8-sig").read().splitlines()


def grid_column(page, grid_id: str, col: str) -> list[str]:
    """The texts of a grid column, rows in the order shown."""
    return page.locator(f"#{grid_id} .ag-center-cols-container .ag-row").evaluate_all(
        "(rows, col) => rows.sort((a, b) => a.getAttribute('row-index') - b.getAttribute('row-index'))"
        ".map(r => r.querySelector(`[col-id='${col}']`).textContent)", col)


def test_kernels_grid_sorts_filters_and_exports_what_it_shows(page):
    page.goto(f"{page.base}/run/{KEYS['stock_ddp']}/kernels")
    grid = page.locator("#k-kernels")
    grid.locator(".ag-row").first.wait_for()
    times = [float(t) for t in grid_column(page, "k-kernels", "GPU time (ms)")]
    assert times == sorted(times, reverse=True) and len(times) > 3  # most GPU time first
    # a text filter: kernels whose short name holds "gemm", any case
    grid.locator(".ag-floating-filter[col-id='kernel'] input:enabled").fill("GEMM")
    page.wait_for_function("[...document.querySelectorAll('#k-kernels .ag-center-cols-container "
                           "[col-id=kernel]')].every(c => c.textContent.includes('gemm'))")
    # sort by calls, ascending
    grid.locator(".ag-header-cell[col-id='calls'] .ag-header-cell-label").click()
    grid.locator(".ag-header-cell[col-id='calls'][aria-sort='ascending']").wait_for()
    names = grid_column(page, "k-kernels", "kernel")
    calls = [int(c) for c in grid_column(page, "k-kernels", "calls")]
    assert calls == sorted(calls) and 0 < len(names) < len(times)
    csv = export_csv(page, "k-kernels")
    assert csv[0] == ("kernel,class,subclass,calls,GPU time (ms),mean (us),"
                      "share of kernel time (%),least on a rank (ms),most on a rank (ms)")
    rows = list(reader(csv[1:]))
    assert [r[0] for r in rows] == names and [int(r[3]) for r in rows] == calls  # as shown


def test_overview_breakdown_keeps_its_plot_area_at_1024_px(page):
    page.set_viewport_size({"width": 1024, "height": 768})
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    page.wait_for_selector("#rank-bars .nsewdrag")
    page.wait_for_timeout(3000)  # it used to collapse about two seconds after load
    plot = page.locator("#rank-bars .nsewdrag").first.bounding_box()
    chart = page.locator("#rank-bars .main-svg").first.bounding_box()
    assert plot["height"] >= 200 and chart["height"] >= 300, (plot, chart)
    assert plot["width"] >= 300


# Rows a hostile trace could put in the kernels grid: names that a spreadsheet runs as
# formulas, and negative numbers, which must stay numbers.
FORMULA_ROWS_JS = """
() => window.dash_ag_grid.getApiAsync("k-kernels").then(api => api.setGridOption("rowData", [
    {"kernel": '=HYPERLINK("http://x","y")', "class": "@SUM(1)", "subclass": "-2",
     "calls": -5, "GPU time (ms)": 9.5},
    {"kernel": "+cmd", "class": "compute", "subclass": "-x", "calls": 1, "GPU time (ms)": -1.5},
]))
"""


def test_export_csv_writes_formula_names_as_text_and_numbers_as_numbers(page):
    page.goto(f"{page.base}/run/{KEYS['stock_ddp']}/kernels")
    page.locator("#k-kernels .ag-row").first.wait_for()
    page.evaluate(FORMULA_ROWS_JS)
    page.wait_for_function("document.querySelectorAll('#k-kernels .ag-row').length === 2")
    rows = list(reader(export_csv(page, "k-kernels")[1:]))
    assert [r[:5] for r in rows] == [
        ["'=HYPERLINK(\"http://x\",\"y\")", "'@SUM(1)", "-2", "-5", "9.5"],
        ["'+cmd", "compute", "'-x", "1", "-1.5"]]
