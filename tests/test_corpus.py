"""Every real trace in ../shared/corpus must ingest, merge and summarise without a crash."""

import gzip

import pytest

from profkit import schema as S
from profkit.run.summary import format_summary
from profkit.timeline.merge import merge_run
from tests.analysed import loaded
from tests.conftest import CORPUS
from tests.realruns import complete_events

FILES = sorted(CORPUS.rglob("*.json.gz")) if CORPUS.is_dir() else []
pytestmark = pytest.mark.skipif(not FILES, reason=f"corpus not found at {CORPUS}")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_trace_ingests_merges_and_summarises(path, tmp_path):
    run = loaded(path)
    (data,) = run.ranks.values()
    raw_x = complete_events(gzip.decompress(path.read_bytes()))
    assert len(data.events) == raw_x
    assert data.events[S.TS_NS].is_monotonic_increasing
    out = tmp_path / "merged.json.gz"
    report = merge_run(run, out)
    assert complete_events(gzip.decompress(out.read_bytes())) == raw_x
    assert report.skipped == []
    assert f"{len(run.ranks)} rank read" in format_summary(run)  # one rank per corpus trace


EXPECTED_COMM = {
    "hta/nccl_parser_config/nccl_data.json.gz": ("all_reduce", "broadcast"),
    "tracelens/b200/eager_trace.json.gz": ("all_gather",),
    "hta/negative_queue_length_values_check/rank0.json.gz": ("all_to_all", "reduce_scatter", "all_reduce"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED_COMM))
def test_corpus_collectives_are_recognised(name):
    """The corpus README lists which collectives these traces hold."""
    run = loaded(CORPUS / name)
    (data,) = run.ranks.values()
    found = set(data.collectives[S.COLL_NAME].astype(str))
    assert set(EXPECTED_COMM[name]) <= found


def test_gpuless_traces_say_so():
    for name in ("hta/cpu_only", "hta/rank_non_gpu"):
        run = loaded(CORPUS / name)
        assert "no GPU events" in format_summary(run)


def test_amd_trace_kernels_and_copies_are_classified():
    run = loaded(CORPUS / "hta/amd_trace")
    gpu = run.ranks[0].gpu_events
    assert set(gpu[S.CLASS].astype(str)) == {S.CLS_COMPUTE, S.CLS_MEMCPY}
