"""In headless chromium: the Overview's verdict is drawn before plotly.js runs (it is not one
of the page's blocking scripts: assets/plotly_early.js loads it after the first paint),
plotly.js is fetched once, and the charts are drawn with it (issue 42, item 6)."""

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
pytestmark = pytest.mark.skipif("stock_ddp" not in KEYS, reason="no bundled sample runs")

# Kept from the page's start: the page clock when the verdict was first in the DOM and when
# window.Plotly first was plotly.js itself (not the loader's promise of it).
MARKS_JS = """
window.__marks = {};
new MutationObserver(() => {
  if (!('verdict' in window.__marks) && document.querySelector('#verdict')) {
    window.__marks.verdict = performance.now();
  }
}).observe(document, {childList: true, subtree: true});
const __plotly = () => {
  const p = window.Plotly;
  if (p && typeof p.then !== 'function' && typeof p.react === 'function') {
    window.__marks.plotly = performance.now();
  } else { setTimeout(__plotly, 2); }
};
__plotly();
"""


def test_the_verdict_is_drawn_before_plotly_runs_and_the_charts_with_it(page, browser_profile):
    first = browser_profile.new_page()  # the run analysed: the verdict comes with the page
    first.goto(f"{page.base}/run/{KEYS['stock_ddp']}")
    first.wait_for_selector("#verdict", timeout=120_000)
    first.close()
    page.add_init_script(MARKS_JS)
    plotly_fetches = []
    page.on("request", lambda r: plotly_fetches.append(r.url) if "plotly" in r.url
            and "plotly_early" not in r.url else None)
    page.goto(f"{page.base}/run/{KEYS['stock_ddp']}")
    for gid in ("rank-bars", "step-heatmap", "rank-detail"):
        page.wait_for_selector(f"#{gid} .main-svg")
    marks = page.evaluate("window.__marks")
    assert "compute bound" in page.locator("#verdict").inner_text()
    assert marks["verdict"] < marks["plotly"], marks  # eager loading: plotly ran first
    assert len(plotly_fetches) == 1, plotly_fetches  # not once more by dcc.Graph
    # another page of the app (no reload): plotly.js is there, not fetched again
    page.click("a.tab:has-text('Kernels')")
    page.wait_for_selector("#k-chart .main-svg")
    assert len(plotly_fetches) == 1


def test_a_findings_two_links_are_apart(page):
    """"see stragglers →" and "see it on the timeline" read as two links, not as one run-on
    "see stragglers →see it on the timeline" (seen in the Overview's screenshot)."""
    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    page.wait_for_selector("#findings .finding .tl-link", timeout=120_000)
    finding = page.locator("#findings .finding", has=page.locator(".cites + .tl-link")).first
    cites = finding.locator(".cites").bounding_box()
    timeline = finding.locator(".tl-link").bounding_box()
    assert timeline["x"] - (cites["x"] + cites["width"]) >= 12


def test_a_page_without_charts_does_not_load_plotly(page):
    """The Runs page draws no chart: plotly.js (4.8 MB to run) is not fetched for it."""
    fetched = []
    page.on("request", lambda r: fetched.append(r.url) if "plotly.min" in r.url else None)
    page.goto(page.base + "/")
    page.locator("a.runlink").first.wait_for()
    page.wait_for_timeout(1500)
    assert fetched == []
