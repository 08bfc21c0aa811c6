"""Collectives named only by their backend's CPU ranges ("gloo:<op>", "nccl:<op>"): the
collective is the part of the name after its first colon, per range (names repeated, with a
second colon, of both backends), in time order."""

from profkit import schema as S
from profkit.trace import tracefile
from profkit.trace.ingest import build_tables
from tests.factories import trace_doc, write_trace


def test_collectives_named_by_their_ranges(tmp_path):
    names = ["gloo:all_reduce", "nccl:broadcast", "gloo:all_reduce", "nccl:all_gather:x",
             "gloo:reduce_scatter", "nccl:broadcast"]
    events = [{"ph": "X", "cat": "user_annotation", "name": name, "ts": 10.0 * (len(names) - i),
               "dur": 5.0, "pid": 100, "tid": 101} for i, name in enumerate(names)]
    events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 1.0,
                   "pid": 100, "tid": 100})
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    coll = build_tables(tracefile.load(path)).frames["collectives"]
    # by hand, latest-named first in the list, so reversed in time order
    assert coll[S.COLL_NAME].astype(str).tolist() == [
        "broadcast", "reduce_scatter", "all_gather", "all_reduce", "broadcast", "all_reduce"]
    assert coll[S.TS_NS].is_monotonic_increasing and not coll[S.ON_GPU].any()
