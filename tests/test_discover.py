"""The walk that finds a run's trace files: never loops, never opens what is not a file,
names everything it leaves out."""

import os
from pathlib import Path

import pytest

from profkit.run import discover
from profkit.run.discover import find_trace_files
from tests.realruns import copy_run

TRACES = ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]


@pytest.fixture
def run(tmp_path) -> Path:
    return copy_run("profkit_ddp", tmp_path / "run")


def names(paths) -> list[str]:
    return [Path(p).name for p in paths]


def reasons(skipped) -> dict[str, str]:
    return {Path(s.path).name: s.reason for s in skipped}


def test_a_directory_loop_is_searched_once_and_named(run):
    (run / "traces" / "again").symlink_to("..")  # traces/again/traces/again/... for ever
    (run / "back").symlink_to(run)
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES
    why = reasons(skipped)
    assert set(why) == {"again", "back"}
    assert why["again"] == f"the same folder as {run}, already searched"


def test_a_second_name_of_a_trace_is_read_once(run):
    (run / "traces" / "rank9.json.gz").symlink_to(run / "traces" / "rank0.pt.trace.json.gz")
    os.link(run / "traces" / "rank1.pt.trace.json.gz", run / "traces" / "rank7.json.gz")
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES
    why = reasons(skipped)
    assert why["rank9.json.gz"] == f"the same file as {run / 'traces' / 'rank0.pt.trace.json.gz'}, read once"
    assert why["rank7.json.gz"].startswith("the same file as")


def test_fifos_devices_and_broken_links_are_named_never_opened(run):
    os.mkfifo(run / "traces" / "rank2.pt.trace.json.gz")  # opening it would block for ever
    (run / "traces" / "rank3.pt.trace.json.gz").symlink_to("/dev/null")
    (run / "traces" / "rank4.pt.trace.json.gz").symlink_to(run / "gone.json.gz")
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES
    why = reasons(skipped)
    assert why["rank2.pt.trace.json.gz"] == "a FIFO, not a trace file: not opened"
    assert why["rank3.pt.trace.json.gz"] == ("a symbolic link to /dev/null, a character device, "
                                             "not a trace file: not opened")
    assert why["rank4.pt.trace.json.gz"].startswith(f"a broken symbolic link (to {run / 'gone.json.gz'}")


def test_a_folder_named_like_a_trace_is_named(run):
    (run / "traces" / "rank2.json").mkdir()
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES
    assert reasons(skipped) == {"rank2.json": "a folder, not a trace file: not searched"}


@pytest.mark.parametrize("entry", ["link", "folder"])
def test_nothing_readable_names_what_was_left_out(tmp_path, capsys, entry):
    from profkit import cli

    run = tmp_path / "run"
    run.mkdir()
    if entry == "link":
        (run / "rank0.json").symlink_to("/dev/zero")  # reading it would never end
        why = "a symbolic link to /dev/zero, a character device, not a trace file: not opened"
    else:
        (run / "rank0.json").mkdir()
        why = "a folder, not a trace file: not searched"
    assert cli.main(["analyze", str(run)]) == 4
    assert f"no trace files (.json or .json.gz) found (skipped: {run / 'rank0.json'}: {why})" \
        in capsys.readouterr().err
    if entry == "link":  # the link itself as the input
        assert cli.main(["summary", str(run / "rank0.json")]) == 2
        assert f"{run / 'rank0.json'}: {why}" in capsys.readouterr().err


def test_files_being_written_are_skipped_silently(run):
    # profkit's temporary naming (profkit/atomic.py, collectors/atomic.py): .tmp-<name>...
    trace = run / "traces" / "rank0.pt.trace.json.gz"
    (run / "traces" / ".tmp-rank0.pt.trace.json.gz.703.json").write_bytes(trace.read_bytes())
    (run / "traces" / ".tmp-rank1.pt.trace.json.gz.x1y2z3").write_bytes(b"half")
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES and skipped == []


def test_capture_folders_are_found_apart(tmp_path):
    parent = tmp_path / "job"
    copy_run("profkit_ddp", parent / "capture-1-20261122T000100")
    copy_run("profkit_ddp", parent / "capture-0-20261122T000000")
    found = discover.walk(parent)
    assert found.traces == [] and found.skipped == []
    assert names(found.captures) == ["capture-0-20261122T000000", "capture-1-20261122T000100"]
    _, skipped = find_trace_files(parent)
    assert "on-demand capture 0: a run of its own" in skipped[0].reason


@pytest.mark.parametrize("name, expected", [
    ("rank3.pt.trace.json.gz", (3, 0)), ("rank3.cycle12.pt.trace.json.gz", (3, 12)),
    ("rank3.pt.trace.json", (3, 0)), ("rank3.old.pt.trace.json.gz", None),
    ("rank3.json", None), ("host_12.1700000000000.pt.trace.json.gz", None)])
def test_profkit_names(name, expected):
    assert discover.profkit_name(name) == expected


def test_capture_numbers():
    assert discover.capture_number(Path("capture-3-20261122T000000")) == 3
    assert discover.capture_number(Path("captures")) is None


def test_files_that_cannot_be_traces_are_not_listed(run):
    """A README, LICENSE, SOURCE.md or notes beside the traces are not a line in every
    report; a file named like a trace in a form profkit does not read is."""
    for name in ("LICENSE", "SOURCE.md", "README.md", "notes.txt", "train.py", "run.log"):
        (run / name).write_text("not a trace")
    for name in ("rank2.json.zst", "rank3.pt.trace.json.gz.1", "rank4.pt.trace"):
        (run / name).write_bytes(b"\x28\xb5\x2f\xfd")
    traces, skipped = find_trace_files(run)
    assert names(traces) == TRACES
    assert reasons(skipped) == {n: "not a trace file (expected .json or .json.gz)"
                                for n in ("rank2.json.zst", "rank3.pt.trace.json.gz.1",
                                          "rank4.pt.trace")}


OUTSIDE = "outside the run directory: not followed"


def test_a_link_out_of_the_run_directory_is_named_not_read(tmp_path, capsys):
    from profkit import cli
    from profkit.run.loader import load_run
    from tests.factories import outside_link_run

    run, outside = outside_link_run(tmp_path)
    (run / "more").symlink_to(outside.parent, target_is_directory=True)  # a folder too
    traces, skipped = find_trace_files(run)
    assert names(traces) == ["rank0.json"]
    why = reasons(skipped)
    assert why["rank1.json"].startswith(f"a symbolic link to {outside}, {OUTSIDE}")
    assert why["more"].startswith(f"a symbolic link to {outside.parent}, {OUTSIDE}")
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0]
    assert any(s.path == str(run / "rank1.json") and OUTSIDE in s.reason for s in loaded.skipped)
    # the link's target named itself, or the link as the file to read: read
    assert load_run(outside, cache=False).rank_ids == [0]
    assert load_run(run / "rank1.json", cache=False).rank_ids == [1]
    # a folder holding only a link out: nothing to analyse, and the error says why
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "rank0.json").symlink_to(outside)
    assert cli.main(["analyze", str(lone), "--no-cache"]) == 4
    assert OUTSIDE in capsys.readouterr().err
