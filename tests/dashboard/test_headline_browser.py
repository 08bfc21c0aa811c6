"""Issue 42 on the Overview, in headless chromium: the biggest win above the verdict, one
combined saving where the findings' savings share time, and the straggler box in the
finding's own words (its p-value and saving: one figure, one value)."""

import pytest
from profkit.dashboard.app import default_roots
from profkit.dashboard.server.registry import RunRegistry

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
pytestmark = pytest.mark.skipif("frameworks/hf_trainer" not in KEYS,
                                reason="the bundled sample runs are absent")


def test_overview_leads_with_the_biggest_win_and_one_combined_saving(page):
    page.goto(f"{page.base}/run/{KEYS['frameworks/hf_trainer']}")
    win = page.locator("#biggest-win")
    assert win.inner_text().startswith("Biggest win: rank 1 straggler, with its launch "
                                       "overhead and host work")
    verdict = page.locator("#verdict")
    assert win.bounding_box()["y"] < verdict.bounding_box()["y"]
    together = " ".join(page.locator("#combined-saving").inner_text().split())
    # 14.62 + 16.74 + 7.33: rank 1's three savings, as its findings give them
    assert "not the 38.69 ms their savings add up to" in together


def test_straggler_box_says_what_its_finding_says(page):
    page.goto(f"{page.base}/run/{KEYS['frameworks/hf_trainer']}")
    box = " ".join(page.locator("#straggler-callout").inner_text().split())
    assert "p=9.3e-10" in box and "could save ~14.62 ms/step" in box
    assert "lose 13.35 ms per step" in box
    assert "13.35 ms per step" in " ".join(page.locator("#verdict").inner_text().split())


def test_straggler_finding_gives_its_wait_once(page):
    """The finding's message says 13.35 ms; its evidence line said 13.4 ms beside it."""
    page.goto(f"{page.base}/run/{KEYS['frameworks/hf_trainer']}")
    first = " ".join(page.locator("#findings .finding").first.inner_text().split())
    assert "13.35 ms" in first and "13.4 ms" not in first
