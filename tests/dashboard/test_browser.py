"""End to end in headless chromium: every page loads without console errors and shows its
key elements; clicks change the view; compare, download and bogus run ids."""

import gzip
import time
import urllib.error
import urllib.request

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.pages.runs import PAGE_ROWS
from profkit.dashboard.server.registry import RunRegistry, run_key

from tests.dashboard.conftest import BAD_RUNS

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
STOCK = KEYS.get("stock_ddp")
pytestmark = pytest.mark.skipif(STOCK is None, reason="the bundled sample runs are absent")
ALL_RUNS_MS = 120_000  # the Runs page analysing its few runs from nothing, under load


def graph_ready(page, graph_id: str):
    page.wait_for_selector(f"#{graph_id} .main-svg")


def test_runs_page_lists_every_sample_with_its_verdict(page, runs_page):
    # every sample run, the bad runs, the one missing a trace and the one with bad sidecars:
    # listed at once, before any is analysed
    page.goto(page.base + "/")
    page.locator("a.runlink").first.wait_for()
    listed = len(KEYS) + len(BAD_RUNS) + 2
    # the grid draws its rows over a few frames: wait for the last, then count them all; past
    # PAGE_ROWS runs it pages them, and its paging summary counts every run
    shown = min(listed, PAGE_ROWS)
    page.wait_for_function(f"document.querySelectorAll('a.runlink').length >= {shown}",
                           timeout=10_000)
    assert page.locator("a.runlink").count() == shown
    if listed > PAGE_ROWS:
        assert f"of {listed}" in page.locator(".ag-paging-row-summary-panel").inner_text()
    # this server runs with --no-background: the runs no test opened wait to be opened
    page.wait_for_function("document.querySelector('#runs-progress').textContent"
                           ".includes('the others are analysed when opened')")
    # their verdicts, on a page of one sample run of each kind (analysing all 55 takes a
    # minute or more on a small machine): rows fill in as their runs are analysed, in the
    # background, in the order of the rows
    runs_page.goto(runs_page.base + "/")
    stock = runs_page.keys["stock_ddp"]
    row = runs_page.locator(f'.ag-row[row-id="{stock}"]')
    row.locator(".badge").wait_for(timeout=ALL_RUNS_MS)
    assert row.locator(".badge").inner_text().lower() == "compute"
    straggler = runs_page.locator(
        f'.ag-row[row-id="{runs_page.keys["zoo/straggler"]}"].run-done')
    straggler.wait_for(timeout=ALL_RUNS_MS)
    assert "straggler: rank 1" in straggler.inner_text()
    row.locator("a.runlink").click()
    runs_page.wait_for_selector("#verdict")
    assert runs_page.url.endswith(f"/run/{stock}")
    assert "compute bound" in runs_page.locator("#verdict").inner_text()


def test_overview_verdict_first_then_graphs_and_a_rank_click(page):
    page.goto(f"{page.base}/run/{STOCK}")
    verdict = page.locator("#verdict")
    assert "compute bound" in verdict.inner_text()
    # one finding per cause per rank: stock_ddp is compute-bound on both ranks
    assert page.locator("#findings .finding").count() >= 2
    for gid in ("rank-bars", "step-heatmap", "rank-detail"):
        graph_ready(page, gid)
    # the verdict is above the charts
    assert verdict.bounding_box()["y"] < page.locator("#rank-bars").bounding_box()["y"]
    title = page.locator("#rank-detail .gtitle")
    assert title.text_content() == "Rank 0: every step"
    bar = page.locator("#rank-bars .bars .point path").nth(1)  # compute bar of rank 1
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_function(
        "document.querySelector('#rank-detail .gtitle').textContent === 'Rank 1: every step'")


def test_overview_verdict_is_on_screen_while_its_charts_are_still_coming(page):
    """The charts are a second request: held back here, the verdict and findings are shown
    without them; let go, they are drawn in their places."""
    held = []

    def hold_charts(route):
        if "overview-charts" in (route.request.post_data or ""):
            held.append(route)
        else:
            route.continue_()

    page.route("**/_dash-update-component*", hold_charts)
    page.goto(f"{page.base}/run/{STOCK}")
    assert "compute bound" in page.locator("#verdict").inner_text()
    for _ in range(100):  # the charts' request is sent once the page is shown
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) == 1
    assert page.locator("#findings .finding").count() >= 2
    assert page.locator(".chart-pending").count() == 3
    assert page.locator("#rank-bars, #step-heatmap, #rank-detail").count() == 0
    held[0].continue_()
    for gid in ("rank-bars", "step-heatmap", "rank-detail"):
        graph_ready(page, gid)
    assert page.locator(".chart-pending").count() == 0


# the margin each side of a drawn chart, and the margin its figure asked for
MARGINS_JS = """id => { const l = document.querySelector(`#${id} .js-plotly-plot`)._fullLayout;
  return [['l', 'r', 't', 'b'].map(k => l._size[k]), ['l', 'r', 't', 'b'].map(k => l.margin[k])]; }"""


@pytest.mark.parametrize("run", ["stock_ddp", "pairs/data_loading/after", "zoo/host_sync"])
def test_overview_charts_are_laid_out_once(page, run):
    """Each chart's figure leaves room for what plotly draws around it (a colour bar, a
    legend, axis titles and labels): where it does not, plotly widens the margin and draws
    the chart a second time (~0.1 s of a warm Overview). The runs: the left-out legend
    under the heatmap, and longer ms labels."""
    page.goto(f"{page.base}/run/{KEYS[run]}")
    for gid in ("rank-bars", "step-heatmap", "rank-detail"):
        graph_ready(page, gid)
        drawn, asked = page.evaluate(MARGINS_JS, gid)
        assert drawn == asked, (gid, drawn, asked)


def test_overview_calls_out_the_straggler(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    callout = page.locator("#straggler-callout")
    assert "rank 1 is a straggler" in callout.inner_text()
    graph_ready(page, "rank-bars")
    assert "straggler" in page.locator("#rank-bars .annotation").all_text_contents()


def test_timeline_zoom_in_by_dragging_sends_every_event(page):
    page.goto(f"{page.base}/run/{STOCK}/timeline")
    graph_ready(page, "tl-graph")
    assert "GPU stream 7" in page.locator("#tl-graph").text_content()
    info = page.locator("#tl-info")
    # no straggler: every rank, binned over the whole run
    assert info.inner_text().startswith("rank 0, rank 1:") and "busy fraction" in info.inner_text()
    # zoom into a 2 ms window by dragging: the server sends every event of it
    box = page.locator("#tl-graph .nsewdrag").first.bounding_box()
    y = box["y"] + 20
    page.mouse.move(box["x"] + box["width"] * 0.30, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.32, y, steps=5)
    page.mouse.up()
    page.wait_for_function("document.querySelector('#tl-info').textContent.includes('every event')")


def test_timeline_download_is_a_merged_gzip_trace(page, tmp_path):
    page.goto(f"{page.base}/run/{STOCK}/timeline")
    graph_ready(page, "tl-graph")
    with page.expect_download(timeout=60_000) as info:
        page.locator("#tl-download-btn").click()
    path = tmp_path / info.value.suggested_filename
    info.value.save_as(path)
    data = path.read_bytes()
    assert path.name.endswith(".json.gz") and data[:2] == b"\x1f\x8b"
    assert b'"traceEvents"' in gzip.decompress(data)[:2000]


def test_kernels_tables_and_class_filter(page):
    page.goto(f"{page.base}/run/{STOCK}/kernels")
    graph_ready(page, "k-chart")
    table = page.locator("#k-kernels")
    # kernel names as people read them, the full name on hover
    cell = table.locator(".ag-cell:has-text('nccl AllReduce f32')").first
    assert "ncclDevKernel" not in table.inner_text()
    cell.hover()
    tip = page.locator(".ag-tooltip")
    tip.wait_for()
    assert "ncclDevKernel_AllReduce_Sum_f32" in tip.inner_text()
    assert "aten::mm" in page.locator("#k-ops").inner_text()
    # launch calls per rank (copy calls are not launches: a blocking one is host_sync)
    assert page.locator("#k-launches").inner_text().count("1038") == 2
    page.get_by_label("compute", exact=True).check()
    page.wait_for_function(
        "!document.querySelector('#k-kernels').textContent.includes('nccl AllReduce')")


def test_communication_heatmap_click_shows_the_collective(page):
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}/comms")
    for gid in ("c-waits", "c-skew"):
        graph_ready(page, gid)
    assert "all_reduce" in page.locator("#c-table").inner_text()
    assert "true" in page.locator("#c-stragglers").inner_text()
    box = page.locator("#c-waits .nsewdrag").first.bounding_box()
    page.mouse.click(box["x"] + 5, box["y"] + box["height"] * 0.25)  # rank 0, first collective
    page.wait_for_function("document.querySelector('#c-detail h3') !== null")
    assert "all_reduce" in page.locator("#c-detail h3").inner_text()
    detail = page.locator("#c-detail").inner_text()  # in units, not raw field names
    assert "rank 0 wait\n" in detail and " ms" in detail and "_ns" not in detail


def test_counters_page_series_and_metric_picker(page):
    page.goto(f"{page.base}/run/{KEYS['profkit_ddp']}/counters")
    graph_ready(page, "n-graph")
    assert "sm clock (MHz)" in page.locator("#n-graph").text_content()  # in words and units
    assert "clock-throttle" in page.locator(".content").inner_text()
    assert page.locator("#n-summary .ag-row").count() == 2  # the NVML table, one row a GPU


def test_counters_page_of_a_run_without_nvml_says_so_once(page):
    """stock torch.profiler traces have no NVML samples: one line says so, with no empty
    chart, no empty NVML table and no hint about throttle shading."""
    page.goto(f"{page.base}/run/{STOCK}/counters")
    none = page.locator("#n-none")
    none.wait_for()
    assert "no NVML samples" in none.inner_text()
    for absent in ("#n-graph", "#n-summary", "#n-metrics"):
        assert page.locator(absent).count() == 0, absent
    text = page.locator(".content").inner_text()
    assert "throttle" not in text and text.count("NVML") == 1


def test_overview_heatmap_marks_the_steps_left_out_of_the_verdict(page):
    """pairs/data_loading/after: step 3 is a one-off (0.7x the median), left out."""
    page.goto(f"{page.base}/run/{KEYS['pairs/data_loading/after']}")
    graph_ready(page, "step-heatmap")
    heatmap = page.locator("#step-heatmap")
    assert "left out of the verdict" in heatmap.locator(".legendtext").all_text_contents()
    assert heatmap.locator(".scatterlayer .point").count() == 1  # one rank-step marked


def test_compare_renders_the_diff(page):
    base, new = KEYS["zoo/balanced"], KEYS["zoo/straggler"]
    page.goto(f"{page.base}/compare?base={base}&new={new}")
    verdict = page.locator("#cmp-verdict")
    assert "regressed" in verdict.inner_text()
    graph_ready(page, "cmp-parts")
    assert "nccl AllReduce" in page.locator("#cmp-kernels").inner_text()  # short names
    assert page.locator("#cmp-ops .ag-center-cols-container .ag-row").count() > 2
    assert "rank 1 became a straggler" in verdict.inner_text()


def test_compare_picks_no_pair_and_its_url_follows_the_dropdowns(page):
    page.goto(f"{page.base}/compare")
    verdict = page.locator("#cmp-verdict")
    assert verdict.inner_text().startswith("Pick the run before the change")
    assert verdict.locator(".badge").count() == 0
    before, after = KEYS["pairs/round_trip/before"], KEYS["pairs/round_trip/after"]
    page.locator("#cmp-new").evaluate("el => { el.dataset.drawn = 'before'; }")
    # the list draws only the options in view: type into its search to reach one
    page.click("#cmp-base")
    page.get_by_role("option").first.wait_for()
    page.keyboard.type("pairs/round_trip/before")
    page.get_by_role("option", name="pairs/round_trip/before", exact=True).click()
    page.wait_for_url(f"**/compare?base={before}")
    page.wait_for_function(  # the page is drawn again from the URL: a new picker
        "document.querySelector('#cmp-new') && !document.querySelector('#cmp-new').dataset.drawn")
    page.click("#cmp-new")
    page.get_by_role("option").first.wait_for()
    page.keyboard.type("pairs/round_trip/after")
    page.get_by_role("option", name="pairs/round_trip/after", exact=True).click()
    page.wait_for_url(f"**/compare?base={before}&new={after}")
    verdict.locator(".badge").wait_for()
    assert verdict.locator(".badge").inner_text().lower() == "improved"
    link = page.url
    page.goto(page.base + "/")
    page.goto(link)  # the link reproduces the view
    page.locator("#cmp-verdict .badge").wait_for()
    assert "improved: median step 63.378 -> 11.167 ms" in page.locator("#cmp-verdict").inner_text()


@pytest.mark.parametrize("base, new, verdict, why", [
    ("pairs/same_compute/a", "pairs/same_compute/b", "unchanged",
     "cannot estimate the noise from 3 and 3 steady step(s)"),
    ("infer_kv", "zoo/compute", "not comparable",
     "inference (no backward) vs training (backward ops, optimizer steps)"),
])
def test_compare_shows_the_diff_verdict_and_its_reasons(page, base, new, verdict, why):
    page.goto(f"{page.base}/compare?base={KEYS[base]}&new={KEYS[new]}")
    box = page.locator("#cmp-verdict")
    box.locator(".badge").wait_for()
    assert box.locator(".badge").inner_text().lower() == verdict
    assert why in box.inner_text()


def test_compare_warns_when_a_side_misses_a_rank_and_shows_every_column(page, missing_run):
    """zoo/straggler against itself without rank 1: the steps match (unchanged), and the
    verdict says, as `profkit diff` does, that the new side is half the run. At the test
    viewport (1400 px) every column of the tables that moved is inside its card."""
    new = run_key(missing_run.name, missing_run.resolve())
    page.goto(f"{page.base}/compare?base={KEYS['zoo/straggler']}&new={new}")
    box = page.locator("#cmp-verdict")
    box.locator(".badge").wait_for()
    assert box.locator(".badge").inner_text().lower() == "unchanged"
    warnings = box.locator(".diff-warnings").inner_text()
    assert "new: 1 of 2 ranks missing (1); its steps are those of the 1 rank analysed" in warnings
    alike = box.locator(".diff-alike").inner_text()  # the diff's measures, in words
    assert "of GPU time in kernels both ran" in alike and "world size 2 vs 2" in alike
    for table in ("#cmp-kernels", "#cmp-ops"):
        header = page.locator(f"{table} [role=columnheader][col-id='delta_ms']")
        header.wait_for()
        assert "change (ms/step/rank)" in header.inner_text()
        deadline = time.monotonic() + 5  # the grid sizes its columns after it is drawn
        while True:
            card = page.locator(table).locator("xpath=ancestor::section[1]").bounding_box()
            cell = header.bounding_box()
            inside = card["x"] <= cell["x"] and \
                cell["x"] + cell["width"] <= card["x"] + card["width"]
            if inside or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert inside, (table, card, cell)


@pytest.mark.parametrize("bad", ["not-a-run", "..%2F..%2Fetc%2Fpasswd", "..%2Fpyproject.toml"])
def test_bogus_run_ids_show_not_found(page, bad):
    page.goto(f"{page.base}/run/{bad}")
    page.wait_for_selector("#not-found")
    assert "not found" in page.locator("#not-found").inner_text().lower()
    assert "root:x:" not in page.content()


@pytest.mark.parametrize("path", ["/run/../../etc/passwd", "/assets/..%2F..%2Fpyproject.toml",
                                  "/assets/../../pyproject.toml",
                                  "/_dash-component-suites/..%2F..%2Fpyproject.toml"])
def test_no_route_reads_files_outside_the_app(server, path):
    import http.client

    host, port = server.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)  # sent as written, not normalised
    body = conn.getresponse().read()
    assert b"root:x:" not in body and b"[project]" not in body


def test_assets_are_local_and_server_binds_loopback(server):
    html = urllib.request.urlopen(server + "/").read().decode()
    assert "cdn" not in html.lower() and "https://" not in html
    assert server.startswith("http://127.0.0.1:")
    with pytest.raises(urllib.error.HTTPError) as info:  # request bodies are capped
        urllib.request.urlopen(urllib.request.Request(
            server + "/_dash-update-component", data=b"x" * (2 << 20),
            headers={"Content-Type": "application/json"}))
    assert info.value.code == 413
