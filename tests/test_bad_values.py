"""One malformed value, or one bad sidecar file, in rank 1 of a real run costs that value or
that file, never rank 0, never a traceback: summary, merge and analyze all keep reading.

Each test is one crash site found by fuzzing the real traces of samples/runs (all of them
crashed, exited non-zero or lost a rank before the values were validated on reading)."""

from __future__ import annotations

import gzip
import json
import logging
import pickle
import shutil
import zlib
from pathlib import Path

import numpy as np
import orjson
import pytest
from profkit.analyzers.executor import analyze_run

from profkit import children, cli
from profkit import schema as S
from profkit.errors import NoTracesError
from profkit.run.loader import load_run
from profkit.timeline.merge import merge_run
from profkit.trace import readlimit
from tests.conftest import REPO

SRC = REPO / "samples" / "runs" / "zoo" / "communication"
TRACE = "traces/rank{}.pt.trace.json.gz"


@pytest.fixture
def run_dir(tmp_path):
    return Path(shutil.copytree(SRC, tmp_path / "run"))


def read_doc(run_dir: Path, rank: int = 1) -> dict:
    return json.loads(gzip.decompress((run_dir / TRACE.format(rank)).read_bytes()))


def write_doc(run_dir: Path, doc, rank: int = 1) -> None:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    (run_dir / TRACE.format(rank)).write_bytes(gzip.compress(data))


def edit_run_json(run_dir: Path, **values) -> None:
    doc = json.loads((run_dir / "run.json").read_text())
    doc.update(values)
    (run_dir / "run.json").write_text(json.dumps(doc))


def complete_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def read_everything(run_dir: Path, caplog, analyze: bool = False):
    """load_run, merge_run and (where main crashed there; it costs ~0.5 s) analyze_run of the
    run: none may raise or log a traceback, and rank 0 (never touched) must be in each
    result. Returns (run, analysis or None, merged doc)."""
    caplog.set_level(logging.INFO)
    run = load_run(run_dir, cache=False, workers=1)
    out = run_dir.parent / "merged.json.gz"
    merge_run(run, out)
    merged = orjson.loads(gzip.decompress(out.read_bytes()))
    analysis = analyze_run(run_dir, cache=False, workers=1) if analyze else None
    assert 0 in run.ranks
    assert analysis is None or 0 in analysis.run["ranks_analyzed"]
    assert any(e.get("pid", -1) in range(1000) for e in merged["traceEvents"])  # rank 0's pids
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    return run, analysis, merged


def one_note(notes: list[str], path_part: str, field: str) -> str:
    """The one note naming the file and the field."""
    hits = [n for n in notes if path_part in n and field in n]
    assert len(hits) == 1, notes
    return hits[0]


@pytest.mark.parametrize("base", ["abc", 1e30, 10**30])
def test_base_time_that_is_no_epoch_ns_reads_as_zero(run_dir, caplog, base):
    doc = read_doc(run_dir)
    first_ts_us = min(e["ts"] for e in complete_events(doc))
    doc["baseTimeNanoseconds"] = base
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=base == "abc")
    assert run.ranks[1].meta["base_time_ns"] == 0
    offset = json.loads((run_dir / "run.json").read_text())["clock_offsets_ns"]["1"]
    assert run.ranks[1].events[S.TS_NS].min() == round(first_ts_us * 1000) - offset
    one_note(run.notes, "rank1.pt", "baseTimeNanoseconds")
    if analysis is not None:
        one_note(analysis.run["notes"], "rank1.pt", "baseTimeNanoseconds")


def test_rank_far_beyond_any_job_falls_back_to_the_file_name(run_dir, caplog):
    doc = read_doc(run_dir)
    doc["distributedInfo"]["rank"] = 10**30
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    assert run.ranks[1].rank_source == "file name"
    assert analysis.run["ranks_analyzed"] == [0, 1]
    one_note(run.notes, "rank1.pt", "distributedInfo.rank")


def test_invalid_utf8_in_a_name_is_replaced(run_dir, caplog):
    raw = json.dumps(read_doc(run_dir)).encode()
    assert raw.count(b'"ProfilerStep#') > 0
    write_doc(run_dir, raw.replace(b'"ProfilerStep#', b'"\xff\xfeProfilerStep#', 1))
    run, _, merged = read_everything(run_dir, caplog)
    names = run.ranks[1].events[S.NAME].astype(str)
    assert names.str.contains("\ufffd").sum() == 1
    assert any("\ufffd" in str(e.get("name", "")) for e in merged["traceEvents"])
    one_note(run.notes, "rank1.pt", "UTF-8")


@pytest.mark.parametrize("where", ["args", "top"])
def test_json_nested_a_thousand_deep_is_cut(run_dir, caplog, where):
    deep = b"[" * 1000 + b"1" + b"]" * 1000
    raw = json.dumps(read_doc(run_dir)).encode()
    if where == "args":  # inside the args of an event, which profkit otherwise skips
        raw = raw.replace(b'"args": {', b'"args": {"junk": ' + deep + b", ", 1)
    else:
        raw = b'{"junk": ' + deep + b", " + raw[1:]
    write_doc(run_dir, raw)
    run, _, _ = read_everything(run_dir, caplog)
    assert len(run.ranks[1].events) == len(complete_events(read_doc(SRC)))
    one_note(run.notes, "rank1.pt", "nested deeper")


@pytest.mark.parametrize("dur", [None, -5, 1e308])
def test_every_duration_missing_negative_or_huge(run_dir, caplog, dur):
    doc = read_doc(run_dir)
    for e in complete_events(doc):
        e.pop("dur") if dur is None else e.update(dur=dur)
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    expected = 86_400 * 10**9 if dur == 1e308 else 0  # clipped to a day, else 0
    assert set(run.ranks[1].events[S.DUR_NS]) == {expected}
    assert analysis.run["ranks_analyzed"] == [0, 1]
    note = one_note(run.notes, "rank1.pt", "dur")
    assert f"{len(complete_events(doc))} events" in note


def test_a_timestamp_off_the_clock_is_dropped_and_counted(run_dir, caplog):
    doc = read_doc(run_dir)
    complete_events(doc)[3]["ts"] = 1e300
    write_doc(run_dir, doc)
    run, _, merged = read_everything(run_dir, caplog)
    assert len(run.ranks[1].events) == len(complete_events(doc)) - 1
    assert "1 events dropped" in one_note(run.notes, "rank1.pt", "ts")
    assert all(abs(e["ts"]) < 1e16 for e in merged["traceEvents"] if "ts" in e)


@pytest.mark.parametrize("key", ["cat", "name"])
def test_a_list_where_an_event_has_text(run_dir, caplog, key):
    doc = read_doc(run_dir)
    complete_events(doc)[0][key] = ["a", "b"]
    write_doc(run_dir, doc)
    run, _, _ = read_everything(run_dir, caplog)
    assert len(run.ranks[1].events) == len(complete_events(doc))
    assert f"{key} (1)" in one_note(run.notes, "rank1.pt", key)


# Op arguments that no profiler writes, each of which cost the whole rank: 33 dimensions
# passed numpy's 32-dimension broadcast (RuntimeError), text inside a shape was repeated by
# the attention formula ("a" * 10**12: MemoryError), so was a list where embedding's
# num_weights goes, and the product of 20,000 dimensions of 2**62 took ~1 s per op before
# the broadcast failed. (name, Input Dims, Input type, Concrete Inputs, the note expected)
COST_NOTE, FLOPS_NOTE = "bytes and vector FLOPs of 1 ops dropped", "FLOPs of 1 ops dropped"
HOSTILE_OPS = {
    "33 dimensions": ("aten::mul", [[1] * 33, [1] * 33], ["float"] * 2, None, COST_NOTE),
    "text in a shape": ("aten::_flash_attention_forward",
                        [["a", 10**12, 1, 1], [1, 2, 1, 4], [1, 2, 1, 4]],
                        ["c10::BFloat16"] * 3, None, FLOPS_NOTE),
    "20,000 dimensions": ("aten::add", [[2**62] * 20_000, [1]], ["float"] * 2, None, COST_NOTE),
    "a list for a count": ("aten::embedding_dense_backward", [[10**6, 10**6], [10**6], []],
                           ["float", "long int", "Scalar"], ["", "", "[1]"], None),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_OPS))
def test_hostile_op_arguments_cost_only_their_op(run_dir, caplog, case):
    name, dims, types, concrete, note = HOSTILE_OPS[case]
    doc = read_doc(run_dir)
    op = next(e for e in complete_events(doc) if e.get("cat") == "cpu_op")
    doc["traceEvents"].append({**op, "name": name, "args": {
        "Input Dims": dims, "Input type": types,
        "Concrete Inputs": concrete or [""] * len(dims)}})
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    assert analysis.run["ranks_analyzed"] == [0, 1]
    events = run.ranks[1].events
    hostile = events[events[S.NAME] == name]
    assert len(hostile) == 1 and hostile[S.OP_READ_BYTES].isna().all()
    assert hostile[S.FLOPS].isna().all()
    if note:
        one_note(run.notes, "rank1.pt", note)


@pytest.mark.parametrize("ph", [[], {}, ["X"], 0])
def test_an_event_whose_phase_is_no_text_costs_only_itself(run_dir, caplog, ph):
    doc = read_doc(run_dir)
    doc["traceEvents"].append({**complete_events(doc)[0], "ph": ph})
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    assert analysis.run["ranks_analyzed"] == [0, 1]
    assert len(run.ranks[1].events) == len(complete_events(doc))
    one_note(run.notes, "rank1.pt", "1 events dropped (not a JSON object, or ph not text)")


def _set_process_name(doc, value):
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            e["args"]["name"] = value


@pytest.mark.parametrize("edit,field,analyze", [
    (lambda d: d.update(deviceProperties=[{"id": [0], "name": ["H200"], "numSms": "132",
                                           "totalGlobalMem": "lots"}]), "deviceProperties[0]", True),
    (lambda d: d.update(deviceProperties=[[1, 2]]), "deviceProperties[0]", False),
    (lambda d: d.update(distributedInfo=[0, 2]), "distributedInfo", False),
    (lambda d: d["distributedInfo"].update(world_size=[2]), "distributedInfo.world_size", False),
    (lambda d: _set_process_name(d, ["python"]), "process_name args.name", False),
    (lambda d: d.update(host_name=["vm"]), "host_name", True),
])
def test_a_list_where_the_header_has_text_or_a_number(run_dir, caplog, edit, field, analyze):
    doc = read_doc(run_dir)
    edit(doc)
    write_doc(run_dir, doc)
    run, analysis, _ = read_everything(run_dir, caplog, analyze)
    assert run.rank_ids == [0, 1]
    assert analysis is None or analysis.run["ranks_analyzed"] == [0, 1]
    one_note(run.notes, "rank1.pt", field)


@pytest.mark.parametrize("key", ["pid", "tid"])
def test_ids_beyond_int64(run_dir, caplog, key):
    doc = read_doc(run_dir)
    for e in complete_events(doc)[:3]:
        e[key] = 10**25
    write_doc(run_dir, doc)
    run, _, _ = read_everything(run_dir, caplog)
    ids = run.ranks[1].events[key]
    assert len(run.ranks[1].events) == len(complete_events(doc))
    assert ids.between(-(2**62), 2**62).all()
    one_note(run.notes, "rank1.pt", "beyond int64")


@pytest.mark.parametrize("values,field", [
    ({"clock_offsets_ns": {"0": 0, "1": "abc"}}, "clock_offsets_ns['1']"),
    ({"clock_offsets_ns": {"0": 0, "1": 1e30}}, "clock_offsets_ns['1']"),
    ({"clock_offsets_ns": [0, 5]}, "clock_offsets_ns"),
    ({"ranks": "abc"}, "ranks"),
    ({"ranks": {"0": "abc", "1": {"host": ["vm"], "pid": "991"}}}, "ranks['1'].host"),
    ({"world_size": "2"}, "world_size"),
])
def test_run_json_with_strings_where_numbers_go(run_dir, caplog, values, field):
    edit_run_json(run_dir, **values)
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    assert run.rank_ids == [0, 1] and analysis.run["ranks_analyzed"] == [0, 1]
    assert run.world_size == 2
    one_note(run.notes, "run.json", field)
    one_note(analysis.run["notes"], "run.json", field)


def test_bad_clock_offset_leaves_that_rank_unshifted(run_dir, caplog):
    edit_run_json(run_dir, clock_offsets_ns={"0": 0, "1": "abc"})
    run, _, _ = read_everything(run_dir, caplog)
    first_ts_ns = min(round(e["ts"] * 1000) for e in complete_events(read_doc(run_dir)))
    base = read_doc(run_dir)["baseTimeNanoseconds"]
    assert run.ranks[1].events[S.TS_NS].min() == base + first_ts_ns


@pytest.mark.parametrize("shape", ["unequal", "2-D", "text"])
def test_nvml_chunk_with_unusable_arrays_is_skipped(run_dir, caplog, shape):
    path = run_dir / "nvml" / "rank1.0.npz"
    with np.load(path) as npz:
        cols = {k: npz[k] for k in npz.files}
    if shape == "unequal":
        cols["power_w"] = cols["power_w"][:-3]
    elif shape == "2-D":
        cols["ts_ns"] = np.stack([cols["ts_ns"], cols["ts_ns"]])
    else:
        cols["ts_ns"] = np.array(["a"] * len(cols["ts_ns"]))
    np.savez(path, **cols)
    run, _, _ = read_everything(run_dir, caplog)
    assert [s.path for s in run.skipped] == [str(path)]
    assert run.ranks[1].counters.empty and not run.ranks[0].counters.empty


def test_truncated_flight_recorder_dump_is_skipped(run_dir, caplog):
    path = run_dir / "nccl" / "flight_recorder_rank1.pkl"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    run, _, _ = read_everything(run_dir, caplog)
    assert [s.path for s in run.skipped] == [str(path)]
    assert set(run.nccl["flight_recorder"]["file"]) == {"flight_recorder_rank0.pkl"}


def test_dump_claiming_a_huge_object_is_skipped(run_dir, caplog):
    path = run_dir / "nccl" / "flight_recorder_rank1.pkl"
    # protocol 4 BINBYTES8 with a length of 2**62 bytes, then 3 bytes of data
    path.write_bytes(b"\x80\x04\x8e" + (2**62).to_bytes(8, "little") + b"abc")
    run, _, _ = read_everything(run_dir, caplog)
    assert [s.path for s in run.skipped] == [str(path)]
    assert "flight-recorder dump" in run.skipped[0].reason


def test_dump_larger_than_any_dump_is_not_read(run_dir, caplog, monkeypatch):
    from profkit.nccl import flight_recorder

    path = run_dir / "nccl" / "flight_recorder_rank1.pkl"
    monkeypatch.setattr(flight_recorder, "MAX_DUMP_BYTES", path.stat().st_size - 1)
    run, _, _ = read_everything(run_dir, caplog)
    assert "larger than a flight-recorder dump" in run.skipped[-1].reason


def test_bad_rank_status_file_is_skipped(run_dir, caplog):
    path = run_dir / "ranks" / "rank1.json"
    path.write_text('{"rank": 1, "status": ["failed"]}')
    run, analysis, _ = read_everything(run_dir, caplog, analyze=True)
    assert [s.path for s in run.skipped] == [str(path)]
    assert [s["path"] for s in analysis.run["skipped_files"]] == [str(path)]


def bomb(path: Path, json_mib: int) -> Path:
    """A gzip file of a trace whose JSON is ``json_mib`` MiB of spaces (compresses ~1000x)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [z.compress(b'{"traceEvents": [')]
    parts += [z.compress(b" " * (1 << 20)) for _ in range(json_mib)]
    path.write_bytes(b"".join(parts + [z.compress(b"]}"), z.flush()]))
    return path


def test_gzip_bomb_is_stopped_at_the_ratio_limit(run_dir, caplog):
    path = bomb(run_dir / TRACE.format(1), 96)
    run, _, _ = read_everything(run_dir, caplog)
    assert run.rank_ids == [0]
    reason = {s.path: s.reason for s in run.skipped}[str(path)]
    assert "decompresses to more than" in reason and "PROFKIT_MAX_TRACE_BYTES" in reason
    so_far = int(reason.split("more than ")[1].split(" bytes")[0].replace(",", ""))
    assert 64 << 20 < so_far <= (64 + 16) << 20  # the floor of the ratio rule, plus one step


def member_bomb(path: Path, json_mib: int) -> Path:
    """A gzip bomb of concatenated members, each 1 MiB of spaces (~1 KB): built in
    milliseconds whatever the JSON it claims."""
    member = gzip.compress(b" " * (1 << 20), 9)
    path.write_bytes(gzip.compress(b'{"traceEvents": [') + member * json_mib
                     + gzip.compress(b"]}"))
    return path


def test_gzip_bomb_is_refused_by_its_ratio_as_it_is_read(run_dir, caplog, monkeypatch):
    """2 MB of gzip claiming 2 GiB of JSON: refused once the JSON read so far passes 100x
    the gzip read so far, not at 100x the whole file (200 MB, memory held until then).
    The floor below which the ratio does not apply, and the step between two checks, are
    lowered from 64 MiB and 16 MiB so that the test reads little."""
    import tracemalloc

    monkeypatch.setattr(readlimit, "MIN_GZIP_LIMIT_BYTES", 4 << 20)
    monkeypatch.setattr(readlimit, "_STEP_BYTES", 1 << 20)
    path = member_bomb(run_dir / TRACE.format(1), 2048)
    assert path.stat().st_size < 3 << 20
    tracemalloc.start()
    try:
        run, _, _ = read_everything(run_dir, caplog)
        peak_bytes = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert run.rank_ids == [0]
    reason = {s.path: s.reason for s in run.skipped}[str(path)]
    assert reason.startswith("decompresses at over 100x its compressed size (")
    assert "from the first" in reason and "x; stopped there)" in reason
    assert peak_bytes < 40 << 20, peak_bytes  # the gzip (2 MB), ~5 MB of JSON, rank 0
    analysis = analyze_run(run_dir, cache=False, workers=1)
    assert analysis.run["ranks_analyzed"] == [0]
    assert any(s["path"] == str(path) and "100x" in s["reason"]
               for s in analysis.run["skipped_files"])


def test_traces_read_at_once_share_one_memory_budget():
    free = 12 << 30
    assert readlimit.memory_budget_bytes(1, free) == 6 << 30
    assert readlimit.memory_budget_bytes(3, free) == 2 << 30  # three workers: 6 GiB in all
    assert readlimit.memory_budget_bytes(64, free) == readlimit.MIN_TRACE_LIMIT_BYTES
    assert readlimit.memory_budget_bytes(1, 64 << 30) == readlimit.ABS_MAX_TRACE_BYTES
    assert readlimit.memory_budget_bytes(2, None) > 0


def test_a_pool_of_workers_shares_the_budget(run_dir, monkeypatch):
    """Three 12 MB traces: with 60 MB free, one reader may hold 30 MB of JSON, each of
    three workers 10 MB; the pool's workers (forked, so they see the lowered numbers) refuse
    them, one process alone reads them."""
    monkeypatch.setattr(readlimit, "available_memory_bytes", lambda: 60 << 20)
    monkeypatch.setattr(readlimit, "MIN_TRACE_LIMIT_BYTES", 1 << 20)
    # forked workers, whatever an earlier test of this process chose (a dashboard test
    # leaves pools on a forkserver, whose workers would not see the numbers above)
    monkeypatch.setattr(children, "_start_method", [])
    raw = gzip.decompress((run_dir / TRACE.format(0)).read_bytes())
    for rank in (0, 1):
        (run_dir / TRACE.format(rank)).unlink()
    for rank in range(3):
        doc = json.loads(raw)
        doc["distributedInfo"].update(rank=rank, world_size=3)
        body = json.dumps(doc).encode()
        (run_dir / f"traces/rank{rank}.json").write_bytes(body + b" " * ((12 << 20) - len(body)))
    (run_dir / "run.json").unlink()
    alone = load_run(run_dir, cache=False, workers=1)
    assert alone.rank_ids == [0, 1, 2]
    for read in (load_run, analyze_run):
        with pytest.raises(NoTracesError) as refused:
            read(run_dir, cache=False, workers=3)
        assert str(refused.value).count("over the limit of 10,485,760 bytes") == 3


def test_trace_limit_override(run_dir, monkeypatch):
    monkeypatch.setenv("PROFKIT_MAX_TRACE_BYTES", str(1 << 20))
    run = load_run(run_dir, cache=False, workers=1)  # both traces are under 1 MiB of JSON
    assert run.rank_ids == [0, 1]
    path = bomb(run_dir / TRACE.format(1), 8)
    run = load_run(run_dir, cache=False, workers=1)
    reason = {s.path: s.reason for s in run.skipped}[str(path)]
    assert "PROFKIT_MAX_TRACE_BYTES=1048576" in reason


@pytest.mark.parametrize("command", ["summary", "merge"])
def test_cli_exits_zero_and_names_the_repair(run_dir, capsys, caplog, command):
    doc = read_doc(run_dir)
    doc["baseTimeNanoseconds"] = "abc"
    write_doc(run_dir, doc)
    dump = run_dir / "nccl" / "flight_recorder_rank1.pkl"
    dump.write_bytes(b"\x80\x04")  # a rank killed as it began its dump
    extra = ["-o", str(run_dir.parent / "m.json.gz")] if command == "merge" else []
    assert cli.main([command, str(run_dir), "--no-cache", *extra]) == 0
    out = capsys.readouterr().out
    assert f"skipped: {dump}: not a readable flight-recorder dump" in out
    assert "note: " in out and "baseTimeNanoseconds 'abc'" in out
    assert not [r for r in caplog.records if r.exc_info]


def test_flight_recorder_still_refuses_classes(run_dir, caplog):
    class_ref = pickle.dumps({"version": "2.10", "entries": [], "x": Path})
    (run_dir / "nccl" / "flight_recorder_rank1.pkl").write_bytes(class_ref)
    run, _, _ = read_everything(run_dir, caplog)
    assert "refusing to load" in run.skipped[0].reason


def test_rank_in_a_file_name_beyond_any_job_is_no_rank(run_dir, caplog):
    doc = read_doc(run_dir)
    del doc["distributedInfo"]
    (run_dir / TRACE.format(1)).unlink()
    name = "rank99999999999999999999999.json"
    (run_dir / "traces" / name).write_text(json.dumps(doc))
    run, _, _ = read_everything(run_dir, caplog)
    assert run.rank_ids == [0, 1] and run.ranks[1].rank_source == "file order"


@pytest.mark.slow
def test_three_mb_gzip_bomb_stays_within_a_bounded_memory(tmp_path):
    """The bomb of the issue: 3 MB of gzip, 3 GB of JSON. The reader stops at 100x the
    compressed size; the process stays far below the 6.3 GB it reached before."""
    import subprocess
    import sys

    path = bomb(tmp_path / "rank0.json.gz", 3000)
    assert path.stat().st_size < 4 << 20
    code = ("import resource, sys; from profkit.trace import tracefile\n"
            "try: tracefile.load(sys.argv[1])\n"
            "except Exception as e: print(type(e).__name__, e)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                         check=True, cwd=REPO).stdout.split("\n")  # this checkout's profkit
    assert out[0].startswith("TraceError") and "PROFKIT_MAX_TRACE_BYTES" in out[0]
    assert int(out[1]) * 1024 < 1 << 30  # ru_maxrss is in KiB
