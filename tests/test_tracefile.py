import gzip

import pytest

from profkit import tracefile
from profkit.errors import TraceError
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
