"""A run's tab pages declare their tab once: the tab bar, the pages' URLs, names and titles
and the order Dash tries their URLs in all follow from the pages' declarations."""

import dash
import pytest
from dash._pages import _path_to_page
from profkit.dashboard import pages
from profkit.dashboard.app import create_app
from profkit.dashboard.pages import frame

# (URL after /run/<key>, tab and page name, browser title), left to right as the bar shows them
SHOWN = [("", "Overview", "profkit: overview"), ("timeline", "Timeline", "profkit: timeline"),
         ("kernels", "Kernels & ops", "profkit: kernels"),
         ("comms", "Communication", "profkit: communication"),
         ("counters", "Counters", "profkit: counters"), ("memory", "Memory", "profkit: memory"),
         ("tables", "Tables", "profkit: tables")]


@pytest.fixture(scope="module")
def app():
    return create_app([], [], background=False)


def links(bar) -> list[tuple[str, str, str]]:
    """(href, text, class) of each tab of a drawn tab bar."""
    return [(link.href, link.children, link.className) for link in bar.children[1].children]


def test_the_tab_bar_shows_the_run_pages_in_their_declared_order(app):
    assert links(frame.run_tabs("k1", "a run", "kernels")) == [
        (f"/run/k1{'/' + path if path else ''}", name, "tab active" if path == "kernels" else "tab")
        for path, name, _ in SHOWN]


def test_every_tab_is_a_page_with_its_url_name_and_title(app):
    for path, name, title in SHOWN:
        page, variables = _path_to_page(f"run/k1/{path}".rstrip("/"))
        assert (page["name"], page["title"], variables) == (name, title, {"run_key": "k1"})
    assert _path_to_page("compare")[0]["name"] == "Compare"
    assert _path_to_page("")[0]["name"] == "Runs"


def test_the_overview_url_is_tried_after_the_other_tabs(app):
    """Its template /run/<run_key> also matches /run/<key>/timeline."""
    templates = [p["path_template"] for p in dash.page_registry.values() if p["path_template"]]
    assert templates[-1] == "/run/<run_key>"


def test_a_page_added_to_the_run_pages_gets_its_tab(monkeypatch):
    extra = frame.RunTab("power", "Power", "power")
    monkeypatch.setattr(pages, "RUN_TABS", (*pages.RUN_TABS, extra))
    assert links(frame.run_tabs("k1", "a run", "power"))[-1] == (
        "/run/k1/power", "Power", "tab active")
