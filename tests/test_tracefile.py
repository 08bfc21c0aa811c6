import gzip
import json

import pytest

from profkit.errors import TraceError
from profkit.trace import tracefile
from tests.factories import trace_doc, write_trace


def problem(path):
    with pytest.raises(TraceError) as info:
        tracefile.load(path)
    assert str(path) in str(info.value)
    return info.value.problem


def test_empty_file(tmp_path):
    (tmp_path / "a.json").write_bytes(b"")
    assert problem(tmp_path / "a.json") == "empty file"


def test_truncated_json(tmp_path):
    path = write_trace(tmp_path / "a.json", trace_doc())
    path.write_bytes(path.read_bytes()[:-200])
    assert problem(path).startswith("truncated JSON")


def test_truncated_gzip(tmp_path):
    path = write_trace(tmp_path / "a.json.gz", trace_doc())
    path.write_bytes(path.read_bytes()[:-50])
    assert "gzip" in problem(path)


def test_corrupt_gzip(tmp_path):
    path = write_trace(tmp_path / "a.json.gz", trace_doc())
    data = bytearray(path.read_bytes())
    data[20:40] = b"\x00" * 20
    path.write_bytes(bytes(data))
    assert "gzip" in problem(path)


def test_not_json(tmp_path):
    (tmp_path / "a.json").write_text("hello, world")
    assert problem(tmp_path / "a.json").startswith("not JSON")


def test_foreign_json(tmp_path):
    (tmp_path / "a.json").write_text('{"name": "my-package", "version": "1.0"}')
    assert "no traceEvents" in problem(tmp_path / "a.json")


def test_gzip_of_empty(tmp_path):
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(b""))
    assert "empty" in problem(tmp_path / "a.json.gz")


def test_bare_event_list_is_a_trace(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[{"ph": "X", "name": "k", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, "tid": 7}]')
    assert len(tracefile.load(path).events()) == 1


def test_unexpected_types_fall_back_to_the_lenient_decoder(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": "12.5", "dur": 2, "pid": 0,'
                    ' "tid": 7, "args": [1, 2]}, {"ph": "X", "name": "ok", "ts": 3, "pid": 1, "tid": 1}]}')
    events = tracefile.load(path).events()
    assert [e.name for e in events] == ["k", "ok"]
    assert events[0].ts == 12.5 and events[0].args is None


def test_gzip_members_and_zero_padding_read_like_gzip_does(tmp_path):
    members = gzip.compress(b'{"traceEvents": [') + gzip.compress(b"]}") + b"\0" * 64
    (tmp_path / "a.json.gz").write_bytes(members)
    assert tracefile.load(tmp_path / "a.json.gz").count == 0
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}') + b"junk")
    assert "gzip" in problem(tmp_path / "b.json.gz")


def reference_cut(raw: bytes, max_depth: int) -> bytes:
    """Byte-by-byte JSON walk: containers opened past ``max_depth`` become 0 (an independent
    implementation of what jsonrepair.cut_deep_nesting does with arrays)."""
    out, depth, in_string, escaped = bytearray(raw), 0, False, False
    for i, c in enumerate(raw):
        if in_string:
            escaped, in_string = (not escaped and c == 0x5C), in_string and (escaped or c != 0x22)
        elif c == 0x22:
            in_string = True
        elif c in b"[{":
            depth += 1
            if depth == max_depth + 1:
                out[i] = ord("0")
                continue
        elif c in b"]}":
            depth -= 1
            if depth == max_depth:
                out[i] = ord(" ")
                continue
        if depth > max_depth:
            out[i] = ord(" ")
    return bytes(out)


@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_cut_deep_nesting_matches_a_byte_walk(monkeypatch, chunk):
    from profkit.trace import jsonrepair

    monkeypatch.setattr(jsonrepair, "_CHUNK_BYTES", chunk)
    doc = (b'{"a": [[["x[\\\\", {"b": "]\\"}"}]]], "c": [1, [2, [3, [4]]]], '
           b'"d": "\\\\\\"[[[", "e": {"f": {"g": {"h": []}}}}')
    for depth in (0, 1, 2, 3, 4, 5):
        cut, n = jsonrepair.cut_deep_nesting(doc, depth)
        assert cut == (reference_cut(doc, depth) if n else doc)
        assert json.loads(cut) is not None  # still JSON
    assert jsonrepair.cut_deep_nesting(doc, 3)[1] == 3  # ["x[\\", ...], [4] and {"h": []}


def test_lenient_decode_repairs_what_it_can_and_counts_it(tmp_path):
    path = tmp_path / "a.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": ["k"], "cat": "kernel", "ts": 1e400,'
                     b' "dur": 2, "pid": 0, "tid": {"a": 1}}, 7, {"ph": ["X"]},'
                     b' {"ph": "X", "name": "ok", "ts": 3, "pid": 1, "tid": 1}]}')
    trace = tracefile.load(path)
    events = trace.events()
    assert [e.name for e in events] == [None, "ok"]
    assert events[0].ts == float("inf") and events[0].tid == "{'a': 1}"
    problems = trace.all_problems()
    assert problems == ["2 events dropped (not a JSON object, or ph not text)",
                        "values of the wrong type ignored in events: name (1), tid (1)"]


def test_events_of_other_phases_are_checked_but_build_nothing(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"traceEvents": [{"ph": "s", "id": 1, "name": "ac2g", "ts": 1, "pid": 0,'
                    ' "tid": 0}, {"ph": "X", "name": "k", "ts": 3, "pid": 1, "tid": 1},'
                    ' {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]}')
    trace = tracefile.load(path)
    flow, complete, meta = trace.events()
    assert not hasattr(flow, "name") and not hasattr(flow, "ts")  # nothing decoded for it
    assert (complete.name, complete.ts, meta.args.name) == ("k", 3.0, "p")
    assert trace.all_problems() == []


def test_an_unknown_phase_costs_only_its_event(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"traceEvents": [{"ph": "Q", "name": "odd", "ts": 1, "pid": 0, "tid": 0},'
                    ' {"name": "no phase"}, {"ph": "X", "name": "k", "ts": 3, "pid": 1, "tid": 1}]}')
    trace = tracefile.load(path)
    assert [getattr(e, "name", None) for e in trace.events()] == [None, None, "k"]
    assert trace.all_problems() == []


@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_json_array_joins_raw_events_into_one_array(count):
    events = [{"ph": "X", "name": f"op{i}", "ts": i, "args": {"k": [i, "x"]}} for i in range(count)]
    doc = json.dumps({"traceEvents": events}, indent=1).encode()
    trace = tracefile.decode("t.json", doc, columns=False)  # the raw split (merge reads it)
    assert json.loads(tracefile.json_array(trace.raw_events)) == events
