"""The Overview lists the findings as the text report does: a finding repeated on several
ranks (same kind, severity and advice) is one item naming the other ranks (issue 42, item 4)."""

from __future__ import annotations

import re

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report.render import to_text
from profkit.dashboard.pages.overview import findings_card

from tests.conftest import REPO


def _texts(node) -> list[str]:
    """Every string under a Dash component, depth first."""
    if isinstance(node, str):
        return [node]
    kids = getattr(node, "children", None)
    if kids is None:
        return []
    return [t for k in (kids if isinstance(kids, list) else [kids]) for t in _texts(k)]


def _items(node) -> list:
    if getattr(node, "className", "") and "finding " in f"{node.className} ":
        return [node]
    kids = getattr(node, "children", None)
    if kids is None or isinstance(kids, str):
        return []
    return [i for k in (kids if isinstance(kids, list) else [kids]) for i in _items(k)]


def _sev(items) -> list[str]:
    return [i.className for i in items]


@pytest.mark.parametrize("run", ["profkit_ddp", "parallel/mesh2x2_hostbound"])
def test_the_overview_folds_per_rank_repeats_like_the_text_report(run):
    a = analyze_run(REPO / "samples" / "runs" / run, workers=1)
    text = to_text(a)
    listed = re.findall(r"^- \[(\w+)\]", text.split("Findings and what to change:")[1],
                        flags=re.M)
    items = _items(findings_card(a, "r"))
    # the text report leaves the info findings out beside others; the Overview keeps them
    judged = [i for i in items if "sev-info" not in i.className] or items[:3]
    assert [c.split()[1].removeprefix("sev-") for c in _sev(judged)] == listed
    assert len(items) < len(a.findings)  # something was folded
    similar = [t for i in judged for t in _texts(i) if "similar on" in t]
    assert len(similar) == text.count("(similar on")
