"""One bad rank costs that rank only: a rank whose analysis fails is set aside and named on
every page of its run; a run that cannot be read at all names the file at fault."""

import json

from profkit.analyzers.analyze import analyze
from profkit.dashboard.pages import comms as page_comms
from profkit.dashboard.pages import counters as page_counters
from profkit.dashboard.pages import kernels as page_kernels
from profkit.dashboard.pages import overview as page_overview
from profkit.dashboard.pages import timeline as page_timeline
from profkit.dashboard.server import loading
from profkit.dashboard.server.registry import RunRegistry
from profkit.dashboard.server.results import ResultCache

from profkit.run.loader import load_run
from tests.dashboard.conftest import BAD_TRACE, STRAGGLER, spoiled_copy

PAGES = (page_overview, page_timeline, page_kernels, page_comms, page_counters)


def huge_rank(doc_bytes: bytes) -> bytes:
    doc = json.loads(doc_bytes)
    doc["distributedInfo"]["rank"] = 10**30  # no int64 holds it: the analysis overflows
    return json.dumps(doc).encode()


def text_of(component) -> str:
    """Every string in a component tree, in order."""
    if isinstance(component, (list, tuple)):
        return " ".join(text_of(c) for c in component)
    if isinstance(component, (str, int, float)):
        return str(component)
    return text_of(getattr(component, "children", None) or [])


def test_a_rank_whose_analysis_fails_is_set_aside_with_its_cause():
    run = load_run(STRAGGLER)

    def analyze_failing_on_rank_1(r):
        if 1 in r.ranks:
            raise OverflowError("rank 1 is broken")
        return analyze(r)

    kept = loading.without_failing_ranks(run, analyze_failing_on_rank_1)
    assert kept.rank_ids == [0] and run.rank_ids == [0, 1]  # the loaded run is untouched
    (skipped,) = kept.skipped
    assert skipped.path.endswith(BAD_TRACE)
    assert "OverflowError: rank 1 is broken" in skipped.reason
    assert loading.without_failing_ranks(run, analyze) is run  # nothing fails: nothing dropped


def test_every_page_of_a_run_with_an_unanalysable_rank_shows_rank_0(tmp_path):
    run = spoiled_copy(tmp_path / "huge-rank", huge_rank)
    results = ResultCache(RunRegistry([run], []))
    (entry,) = results.registry.entries()
    for page in PAGES:
        text = text_of(page.layout(results, entry.key))
        assert "Could not analyze" not in text and "could not be drawn" not in text
        if "1 of 2 ranks analysed" in text:  # rank 1 set aside, named with its reason
            assert BAD_TRACE in text and "rank could not be analysed" in text
        else:  # the loader read rank 1 after all: then it is analysed too
            assert results.run(entry.key).rank_ids == [0, 1]
    assert 0 in results.run(entry.key).rank_ids
    assert results.analysis(entry.key).run["ranks_analyzed"][0] == 0


def test_a_run_nothing_of_which_can_be_read_names_the_file(tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "rank0.pt.trace.json").write_text('{"traceEvents": [')  # truncated
    value = loading.load(run)
    assert isinstance(value, loading.RunReadError)
    assert "rank0.pt.trace.json" in str(value) and "truncated" in str(value)


def test_when_the_loader_itself_fails_the_file_at_fault_is_named(monkeypatch):
    real_ingest = loading.loader.ingest_file

    def ingest_failing_on_rank_1(path, *args, **kwargs):  # stands in for a loader bug
        if path.endswith(BAD_TRACE):
            raise TypeError("unhashable type: 'list'")
        return real_ingest(path, *args, **kwargs)

    monkeypatch.setattr(loading.loader, "ingest_file", ingest_failing_on_rank_1)
    message = loading.unreadable_message(STRAGGLER, TypeError("unhashable type: 'list'"))
    assert f"{BAD_TRACE}: TypeError: unhashable type: 'list'" in message
    assert "rank0" not in message
