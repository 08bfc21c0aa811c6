"""The Runs page is a grid (AG Grid) in headless chromium: every run is listed at once (no
blank page while the runs are analysed), the rows fill in as their runs are done, and a
click on a header sorts the rows, text typed under it filters them."""

import time

from tests.dashboard.test_pages import ALL_RUNS_MS

ROWS = ".ag-center-cols-container .ag-row"


def labels(page) -> list[str]:
    """The runs' names in the order the grid shows them (its DOM order, ensureDomOrder)."""
    return page.locator(f"{ROWS} a.runlink").all_inner_texts()


def test_the_runs_grid_lists_every_run_at_once_then_sorts_and_filters(runs_page):
    page = runs_page
    start = time.monotonic()
    page.goto(page.base + "/")
    page.locator(f"{ROWS} a.runlink").first.wait_for()
    listed_s = time.monotonic() - start
    assert sorted(labels(page)) == sorted(e for e in page.keys)  # every run, before its verdict
    assert listed_s < 10, f"the rows appeared after {listed_s:.1f} s"
    page.wait_for_selector("#runs-progress:has-text('runs analysed')", timeout=ALL_RUNS_MS)
    assert page.locator(f"{ROWS}.run-done").count() + page.locator(
        f"{ROWS}.run-failed").count() == len(page.keys)
    # sort by name: ascending, then descending
    header = page.locator('.ag-header-cell[col-id="run"] .ag-header-cell-label')
    header.click()
    page.wait_for_function("document.querySelector('.ag-header-cell[col-id=\"run\"]')"
                           ".getAttribute('aria-sort') === 'ascending'")
    assert labels(page) == sorted(page.keys)
    header.click()
    page.wait_for_function("document.querySelector('.ag-header-cell[col-id=\"run\"]')"
                           ".getAttribute('aria-sort') === 'descending'")
    assert labels(page) == sorted(page.keys, reverse=True)
    # filter by name: only the runs whose name holds the text
    box = page.locator(".ag-floating-filter[col-id='run'] input:enabled")
    box.fill("zoo/")
    page.wait_for_function(f"document.querySelectorAll('{ROWS}').length === "
                           f"{sum('zoo/' in k for k in page.keys)}")
    assert sorted(labels(page), reverse=True) == labels(page)
    assert all("zoo/" in name for name in labels(page)) and labels(page)
    # the verdict column filters by its words: the straggler run's row is compute-bound
    box.fill("")
    page.locator(".ag-floating-filter[col-id='verdict'] input:enabled").fill("compute")
    page.wait_for_function(f"document.querySelectorAll('{ROWS}').length < {len(page.keys)}")
    shown = page.locator(f"{ROWS} [col-id='verdict']").all_inner_texts()
    assert shown and all("compute" in v.lower() for v in shown)
    # a run's name opens its Overview inside the app
    page.locator(f"{ROWS} a.runlink").first.click()
    page.wait_for_selector("#verdict")
    assert "/run/" in page.url
