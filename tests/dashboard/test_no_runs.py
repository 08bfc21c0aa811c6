"""An installed profkit (`pip install .`) has no sample runs: `profkit dashboard` with no
RUN and no --root lists nothing. Its Runs page says so in words, with the commands as code
(not "all 0 runs analysed", not Markdown backticks printed as such), and `--help` promises
no bundled runs."""

from pathlib import Path

from dash import html
from profkit.dashboard.pages import runs as page_runs
from profkit.dashboard.server.registry import RunRegistry
from profkit.dashboard.server.results import ResultCache

from profkit.cli.main import build_parser


def texts(component) -> list[str]:
    """Every string in a component tree."""
    if isinstance(component, str):
        return [component]
    children = getattr(component, "children", None)
    children = children if isinstance(children, (list, tuple)) else [children]
    return [t for c in children if c is not None for t in texts(c)]


def codes(component) -> list[str]:
    if isinstance(component, html.Code):
        return ["".join(texts(component))]
    children = getattr(component, "children", None)
    children = children if isinstance(children, (list, tuple)) else [children]
    return [t for c in children if c is not None and not isinstance(c, str) for t in codes(c)]


def test_no_runs_and_no_root_says_so_without_backticks():
    page = page_runs.layout(ResultCache(RunRegistry([], []), persist=False))
    words = " ".join(texts(page))
    assert "`" not in words and "all 0 runs" not in words
    assert "No runs were named." in words and "No runs to show yet." in words
    assert codes(page) == ["profkit dashboard RUN [RUN ...]", "profkit dashboard --root DIR"]


def test_an_empty_root_is_named(tmp_path: Path):
    page = page_runs.layout(ResultCache(RunRegistry([], [tmp_path]), persist=False))
    assert "No run folders under" in " ".join(texts(page))
    assert str(tmp_path.resolve()) in codes(page)


def test_help_promises_no_bundled_runs():
    sub = build_parser()._subparsers._group_actions[0].choices["dashboard"]
    text = " ".join(sub.format_help().split())
    assert "bundled" not in text
    assert "an installed profkit has none" in text
