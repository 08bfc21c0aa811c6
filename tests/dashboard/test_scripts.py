"""The scripts a page loads: the chunks the pages render come with the page (the graph and
dropdown, AG Grid's community modules), the ones no page renders do not, and those are
still served if a component asks for them; plotly.js is loaded after the first paint
(assets/plotly_early.js), from the address dcc.Graph would load it from."""

import re

import pytest
from profkit.dashboard.app import UNUSED_CHUNKS, create_app


@pytest.fixture(scope="module")
def client():
    return create_app([], []).server.test_client()


@pytest.fixture(scope="module")
def scripts(client) -> list[str]:
    html = client.get("/").get_data(as_text=True)
    return re.findall(r'<script src="([^"]+)"', html)


@pytest.mark.parametrize("chunk", ["dcc/async-graph", "dcc/async-dropdown",
                                   "dash_ag_grid/async-community", "dash_ag_grid.v"])
def test_the_chunks_pages_render_come_with_the_page(scripts, chunk):
    assert any(chunk in s for s in scripts), scripts


@pytest.mark.parametrize("library,chunk", [(lib, c) for lib, chunks in UNUSED_CHUNKS.items()
                                           for c in chunks])
def test_chunks_no_page_renders_are_not_loaded_with_the_page(scripts, library, chunk):
    folder = {"dash.dcc": "dcc/", "dash.dash_table": "dash_table/", "dash_ag_grid": ""}[library]
    assert not [s for s in scripts if f"{folder}async-{chunk}." in s]


@pytest.mark.parametrize("path", ["dash/dcc/async-mathjax.js",
                                  "dash_ag_grid/async-enterprise.js",
                                  "dash/dash_table/async-table.js"])
def test_a_chunk_left_out_is_still_served_on_demand(client, path):
    answer = client.get(f"/_dash-component-suites/{path}")
    assert answer.status_code == 200 and len(answer.get_data()) > 1000


def test_plotly_is_not_a_blocking_script_but_its_loader_is_and_it_is_served(client, scripts):
    assert not [s for s in scripts if "plotly" in s and "plotly_early" not in s], scripts
    assert sum("/assets/plotly_early.js" in s for s in scripts) == 1
    # where dash-renderer points dcc.Graph (window._dashPlotlyJSURL), and the loader too
    answer = client.get("/_dash-component-suites/plotly/package_data/plotly.min.js")
    assert answer.status_code == 200 and len(answer.get_data()) > 3_000_000
