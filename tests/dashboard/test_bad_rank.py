"""In headless chromium: a 2-rank run whose rank 1 trace is bad (truncated, or a list where
``cat`` belongs) still shows rank 0 on every one of its pages, each with a note naming the
skipped file and "1 of 2 ranks analysed"; never a blank "Could not analyze" page,
never a 500 (the page fixture fails on any console error). A run the loader cannot read at
all names the file at fault instead."""

import pytest
from profkit.dashboard.server.registry import run_key

from profkit.errors import ProfkitError
from profkit.run.loader import load_run
from tests.dashboard.conftest import BAD_RUNS, BAD_TRACE

# tab link text -> what the page shows once rank 0 is drawn (with one rank of two no
# collective is matched across ranks: the communication page draws its graphs empty)
RANK0 = {
    "Overview": "#rank-bars .xtick:has-text('rank 0')",
    "Timeline": "#tl-info:has-text('rank 0:')",
    "Kernels & ops": "#k-kernels:has-text('nccl AllReduce')",
    "Communication": "#c-skew .main-svg",
    "Counters": "#n-graph .legendtext:has-text('rank 0')",
}


def loader_reads(path) -> bool:
    """Whether the loader itself gets through the run (its bad file skipped or repaired)."""
    try:
        load_run(path, cache=False)
    except ProfkitError:
        raise
    except Exception:  # the loader on this branch lets this malformed value escape
        return False
    return True


def open_tab(page, name: str) -> None:
    page.locator(".tabs a", has_text=name).click()
    page.wait_for_selector(f".tabs a.active:text-is('{name}')")


@pytest.mark.parametrize("name", BAD_RUNS)
def test_every_page_shows_rank_0_and_names_the_bad_file(page, bad_runs, name):
    path = bad_runs[name].resolve()
    page.goto(f"{page.base}/run/{run_key(path.name, path)}")
    if not loader_reads(path):
        # Nothing of the run can be read: the page says which file fails and why.
        page.wait_for_selector(".card .error")
        error = page.locator(".card .error").inner_text()
        assert BAD_TRACE in error and "TypeError" in error
        return
    notes = set()
    for tab, selector in RANK0.items():
        open_tab(page, tab)
        page.wait_for_selector(selector)
        assert "Could not analyze" not in page.content()
        assert page.locator(".panel-error").count() == 0
        note = page.locator("#run-note")
        notes.add(note.inner_text() if note.count() else None)
        if tab == "Overview":
            verdict = page.locator("#verdict").inner_text()
            rank1_drawn = page.locator("#rank-bars .xtick:has-text('rank 1')").count() > 0
    (note,) = notes  # the same banner on every page of the run, naming the bad file
    assert note is not None and BAD_TRACE in note
    if "1 missing" in note:  # rank 1 set aside, with its reason
        assert "1 of 2 ranks analysed: 1 missing (1)" in note
        assert "over 1 rank," in verdict and not rank1_drawn
    else:  # the loader repaired the value (a note says which) and read rank 1: shown too
        assert "2 of 2 ranks analysed" in note and "wrong type ignored" in note
        assert "over 2 ranks," in verdict and rank1_drawn
