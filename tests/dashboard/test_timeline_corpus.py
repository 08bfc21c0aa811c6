"""The timeline of every real trace in the shared corpus (other people's captures: no steps,
no rank, no GPU, AMD, CUDA graphs) is drawn without a crash, over the whole run and zoomed."""

import pytest
from profkit.analyzers.analyze import analyze
from profkit.dashboard.pages import timeline as PT
from profkit.dashboard.timeline import links as TL

from profkit.run.loader import load_run
from tests.test_corpus import FILES


class OneRun:
    """The two things of a result cache the timeline asks for, over one run."""

    def __init__(self, run):
        self.pair = run, analyze(run)

    def loaded(self, _key):
        return self.pair

    def fingerprint(self, _key):
        return "fixed"

    def get_or_compute(self, _key, compute):
        return compute()


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_corpus_trace_draws_whole_and_zoomed(path):
    run = load_run(path, cache=False)
    results = OneRun(run)
    ranks = TL.default_ranks(run, results.pair[1])
    fig, info, _note = PT.view_figure(results, "k", ranks, None, True)
    assert fig.layout.xaxis.range is not None and " events in " in info
    lo, hi = fig.layout.xaxis.range
    fig, info, _note = PT.view_figure(results, "k", ranks, (lo, lo + (hi - lo) / 100), True)
    assert " events in " in info
