"""Notebook display: Analysis and Diff as self-contained HTML, and the top-level
profkit.load_run / analyze / diff that a notebook uses (without pandas at import)."""

from __future__ import annotations

import re
import subprocess
import sys
from html import escape
from html.parser import HTMLParser

import pytest
from profkit.analyzers.report.headline import verdict_text

import profkit
from tests.conftest import REPO

RUN = REPO / "samples" / "runs" / "stock_ddp"
OTHER = REPO / "samples" / "runs" / "profkit_ddp"


class Tags(HTMLParser):
    """Every tag and attribute, to look for scripts and anything fetched from elsewhere."""

    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]


def parsed(html: str) -> Tags:
    t = Tags()
    t.feed(html)
    t.close()
    return t


def assert_self_contained(html: str) -> None:
    t = parsed(html)
    assert not {"script", "link", "img", "iframe", "object", "embed", "style"} & set(t.tags)
    assert not [a for a in t.attrs if a[1] in ("src", "href") or a[1].startswith("on")]
    assert not re.search(r"url\(|https?://|//cdn", html)


@pytest.fixture(scope="module")
def analysis():
    return profkit.analyze(RUN)


def test_analysis_html_has_the_verdict_chart_and_findings(analysis):
    html = analysis._repr_html_()
    # the verdict as the headline reads it (its memory-bound share inside the compute)
    assert escape(verdict_text(analysis)) in html
    assert_self_contained(html)
    # one bar for the run and one per rank, each segment as wide as its share of the step
    fractions = analysis.verdict["fractions"]
    assert f'title="compute: {fractions["compute"]:.1%}" style="width:{100 * fractions["compute"]:.3f}%' in html
    assert html.count(">rank ") == 2 and ">run<" in html
    for f in analysis.findings:
        assert escape(f.message) in html


def test_text_from_the_trace_is_escaped(analysis):
    from profkit.analyzers.report.html import analysis_html
    from profkit.analyzers.result import Finding

    analysis.findings.append(Finding(category="x", severity="warning",
                                     message="<script>alert(1)</script>", recommendation=""))
    try:
        html = analysis_html(analysis)
    finally:
        analysis.findings.pop()
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_diff_html(analysis):
    d = profkit.diff(RUN, OTHER)
    html = d._repr_html_()
    assert escape(d.verdict["summary"]) in html
    assert_self_contained(html)
    parts = d.tables["diff_parts"]
    assert html.count("&rarr;") == len(parts) + 1  # a row per part, and base -> new in the title
    assert "GPU kernels that changed most" in html and "Kernel groups that changed" in html


def test_top_level_api_is_lazy_and_importable(tmp_path):
    code = ("import sys, profkit; assert 'pandas' not in sys.modules, 'pandas at import'; "
            "from profkit import analyze, diff, load_run; "
            "assert {'analyze', 'diff', 'load_run'} <= set(dir(profkit)); print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_repr_is_one_short_line(analysis):
    text = repr(analysis)
    assert "\n" not in text and len(text) < 300
    assert text.startswith(f"<Analysis of {RUN}: ranks 0-1; ")
    assert analysis.verdict["summary"] in text and text.endswith(" findings>")


def test_the_html_page_opens_with_its_title(analysis):
    from profkit.analyzers.report.html_page import to_html

    page = to_html(analysis)
    body = page[page.index("<body>"):]
    title = f"profkit analysis of {escape(str(RUN))}"
    assert f"<title>{title}</title>" in page and page.count("<h1") == 1
    h1 = body.index("<h1")
    assert body[body.index(">", h1) + 1:body.index("</h1>")] == title
    assert h1 < body.index("ranks analysed") < body.index(escape(verdict_text(analysis)))
    assert "<b>profkit analysis</b>" not in page  # the title is said once
    assert "rank(s)" not in page
