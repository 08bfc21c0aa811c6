import os
import subprocess
import sys

import pytest

from profkit.cli import build_parser, main, parse_ranks
from tests.factories import trace_doc, write_trace

SUBCOMMANDS = ("merge", "summary", "analyze", "diff", "ncu", "launch", "dashboard")


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "profkit", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def test_cli_surface_is_frozen():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(SUBCOMMANDS)


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    assert "usage: profkit " + command in capsys.readouterr().out


def test_parse_ranks():
    assert parse_ranks("0,2,4-6") == [0, 2, 4, 5, 6]


def test_merge_end_to_end_with_a_bad_rank(tmp_path):
    write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0))
    (tmp_path / "run" / "rank1.json").write_text('{"traceEvents": [')
    proc = run_cli("merge", tmp_path / "run", "-o", tmp_path / "out.json.gz")
    assert proc.returncode == 0, proc.stderr
    assert "skipped" in proc.stderr and "rank1.json: truncated JSON" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "out.json.gz").stat().st_size > 0


@pytest.mark.parametrize("content, problem", [
    (b"", "empty file"), (b"\x1f\x8b\x08\x00garbage", "gzip"), (b"<html>", "not JSON"),
    (b'{"a": 1}', "not a trace"),
])
def test_bad_single_file_gets_one_clear_line(tmp_path, content, problem):
    path = tmp_path / "rank0.json"
    path.write_bytes(content)
    proc = run_cli("merge", path, "-o", tmp_path / "out.json")
    assert proc.returncode == 4
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and problem in lines[0]
    assert not (tmp_path / "out.json").exists()


def test_missing_path_is_a_usage_error(tmp_path):
    proc = run_cli("summary", tmp_path / "nope")
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_analyze_result_cache_follows_the_run(tmp_path):
    import json

    from profkit.run import cache

    write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0, world_size=2))
    first = run_cli("analyze", tmp_path / "run", "--format", "json")
    assert first.returncode == 0, first.stderr
    assert list((tmp_path / "run" / ".profkit" / "cache").glob("result-*.data"))
    key = cache.run_fingerprint(tmp_path / "run")
    write_trace(tmp_path / "run" / "rank1.json", trace_doc(rank=1, world_size=2))
    assert cache.run_fingerprint(tmp_path / "run") != key  # a new file changes the key
    second = run_cli("analyze", tmp_path / "run", "--format", "json")
    assert json.loads(first.stdout)["run"]["ranks_analyzed"] == [0]
    assert json.loads(second.stdout)["run"]["ranks_analyzed"] == [0, 1]


# --- analyze: --strict and --tables -------------------------------------------------------

def _one_of_eight(tmp_path):
    """param_dlrm_8rank with only rank 0's trace: 7 of its 8 ranks missing."""
    import shutil

    from tests.conftest import REPO

    run = tmp_path / "run"
    run.mkdir()
    [rank0] = (REPO / "tests" / "data" / "public" / "param_dlrm_8rank").glob("worker0_*")
    shutil.copy(rank0, run / rank0.name)
    return run


def test_strict_analyze_writes_the_report_then_fails(tmp_path, capsys):
    run = _one_of_eight(tmp_path)
    assert main(["analyze", str(run), "--no-cache", "-o", str(tmp_path / "a.txt")]) == 0
    capsys.readouterr()
    (tmp_path / "a.txt").unlink()
    assert main(["analyze", str(run), "--no-cache", "--strict", "-o", str(tmp_path / "a.txt")]) == 7
    err = capsys.readouterr().err
    assert "--strict: 7 of 8 ranks missing (1-7)" in err and "the report was written" in err
    assert (tmp_path / "a.txt").read_text().splitlines()[1] == "1 of 8 ranks analysed: 7 missing (1-7)"


def test_strict_analyze_of_a_whole_run_passes(tmp_path, capsys):
    from tests.realruns import copy_run

    run = copy_run("zoo/balanced", tmp_path / "run")
    assert main(["analyze", str(run), "--no-cache", "--strict"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "2 of 2 ranks analysed"


def test_analyze_help_says_what_strict_counts(capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in ("exit with code 7", "ranks are missing", "guessed from file order",
                  "--tables DIR", "--tables-format {csv,parquet}"):
        assert words in text


def _tables(tmp_path, *extra):
    from tests.realruns import copy_run

    run = copy_run("zoo/straggler", tmp_path / "run")
    out = tmp_path / "tables"
    code = main(["analyze", str(run), "--no-cache", "--format", "json", "-o",
                 str(tmp_path / "a.json"), "--tables", str(out), *extra])
    return code, out


def test_tables_are_readable_csvs_matching_the_json(tmp_path):
    import csv
    import json

    code, out = _tables(tmp_path)
    assert code == 0
    doc = json.loads((tmp_path / "a.json").read_text())
    index = json.loads((out / "index.json").read_text())
    assert index["schema"] == "profkit.tables/1" and index["format"] == "csv"
    listed = {t["file"] for t in index["tables"]}
    assert listed | {"index.json"} == {p.name for p in out.iterdir()}
    assert {"rank_breakdown.csv", "top_kernels.csv", "efficiency.csv", "collectives.csv",
            "transfers.csv", "idle_code.csv"} <= listed
    rows = {t["file"]: list(csv.DictReader((out / t["file"]).open())) for t in index["tables"]
            if t["columns"]}
    assert all(len(rows[t["file"]]) == t["rows"] for t in index["tables"] if t["columns"])
    for rank in doc["ranks"]:
        [row] = [r for r in rows["rank_breakdown.csv"] if int(r["rank"]) == rank["rank"]]
        assert float(row["step_time_ms"]) == rank["step_time_ms"]
        assert {p: float(row[p]) for p in rank["breakdown"]} == rank["breakdown"]
    kernels = rows["top_kernels.csv"]
    assert [k["name"] for k in kernels] == [k["name"] for k in doc["top_kernels"]]
    assert [int(k["total_ns"]) for k in kernels] == [k["total_ns"] for k in doc["top_kernels"]]


def test_tables_as_parquet_hold_the_same_numbers(tmp_path):
    import csv

    import pyarrow.parquet as pq

    code, out = _tables(tmp_path, "--tables-format", "parquet")
    assert code == 0
    frame = pq.read_table(out / "rank_breakdown.parquet").to_pandas()
    code, csv_out = _tables(tmp_path / "again")
    rows = list(csv.DictReader((csv_out / "rank_breakdown.csv").open()))
    assert list(frame["compute"]) == [float(r["compute"]) for r in rows]


def test_tables_replace_an_earlier_output_and_nothing_else(tmp_path, capsys):
    code, out = _tables(tmp_path)
    assert code == 0
    (out / "stale.csv").write_text("from an earlier run\n")
    assert _tables(tmp_path / "2", "--tables", str(out))[0] == 0  # the last --tables wins
    assert not (out / "stale.csv").exists() and (out / "index.json").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    capsys.readouterr()
    assert _tables(tmp_path / "3", "--tables", str(mine))[0] == 6
    err = capsys.readouterr().err
    assert f"cannot write {mine}: the folder holds other files: not replaced" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    in_the_way = tmp_path / "file"
    in_the_way.write_text("a file")
    assert _tables(tmp_path / "4", "--tables", str(in_the_way))[0] == 6
    assert in_the_way.read_text() == "a file"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


# --- selections that match nothing, and one error prefix -----------------------------------

@pytest.mark.parametrize("command", ["analyze", "diff"])
def test_steps_that_match_nothing_are_refused(command, capsys):
    from tests.realruns import RUNS

    run = str(RUNS / "zoo" / "straggler")
    runs = [run] if command == "analyze" else [run, run]
    assert main([command, *runs, "--no-cache", "--steps", "9:12"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no report of steps it would say were left out
    assert captured.err.strip() == ("profkit: error: --steps 9:12: no step of this run is in "
                                    "that range (ranks 0-1: steps 2-4)")


def test_steps_that_meet_some_steps_are_a_report(capsys):
    from tests.realruns import RUNS

    assert main(["analyze", str(RUNS / "zoo" / "straggler"), "--no-cache", "--steps", "3:12"]) == 0
    assert "ranks 0-1: 2 of 3 (3-4)" in capsys.readouterr().out


def test_steps_on_a_trace_without_steps_are_refused(capsys):
    from tests.realruns import RUNS

    assert main(["analyze", str(RUNS / "diagnosis" / "marker_steps"), "--no-cache",
                 "--steps", "1:2"]) == 2
    assert "this run has no step ranges" in capsys.readouterr().err


def test_merge_steps_that_match_nothing_name_the_steps(tmp_path, capsys):
    from tests.realruns import RUNS

    assert main(["merge", str(RUNS / "zoo" / "straggler"), "--no-cache", "--steps", "9:12",
                 "-o", str(tmp_path / "m.json")]) == 2
    assert "(the run has steps 2-4)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["analyze", "summary", "merge"])
def test_ranks_that_match_nothing_are_refused(command, tmp_path, capsys):
    from tests.realruns import RUNS

    run = RUNS / "zoo" / "straggler"
    extra = ["-o", str(tmp_path / "m.json")] if command == "merge" else []
    assert main([command, str(run), "--no-cache", "--ranks", "5", *extra]) == 2
    assert capsys.readouterr().err.strip() == (
        f"profkit: error: --ranks 5: {run} has no trace of rank 5; it has traces of ranks 0-1")
    assert not (tmp_path / "m.json").exists()


def test_ranks_of_which_some_are_there_are_named_in_a_note(capsys):
    from tests.realruns import RUNS

    run = RUNS / "zoo" / "straggler"
    assert main(["analyze", str(run), "--no-cache", "--ranks", "1,5"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 ranks analysed (ranks 1,5 asked for)" in out
    assert "note: --ranks: no trace of rank 5 in this run (it has traces of ranks 0-1)" in out
    assert main(["analyze", str(run), "--no-cache", "--ranks", "1"]) == 0
    assert "(rank 1 asked for)" in capsys.readouterr().out  # "rank 1", not "ranks 1"


def test_launch_errors_have_one_prefix(tmp_path):
    proc = run_cli("launch", "--run-dir", tmp_path / "run", "--")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "profkit: error: no command given after '--'"
    proc = subprocess.run([sys.executable, "-m", "profkit.collectors.launch", "--run-dir",
                           str(tmp_path / "run"), "--", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.stderr.strip() == (f"profkit launch: error: cannot run '{tmp_path / 'nope'}': "
                                   "No such file or directory")


def test_counts_read_as_words(tmp_path, capsys):
    from tests.realruns import RUNS

    run = RUNS / "diagnosis" / "graph_capture_only"
    assert main(["analyze", str(run), "--no-cache"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1 of 1 rank analysed" in out and "(1 kernel kept)" in out
    assert "1 rank, 3 rank-steps" in out and "(s)" not in out
    assert main(["merge", str(RUNS / "zoo" / "straggler"), "--no-cache", "-q",
                 "-o", str(tmp_path / "m.json")]) == 0
    assert "events from ranks 0-1 (open it" in capsys.readouterr().out


BLAS_PROBE = ("import atexit, gc, os, sys; atexit.register(lambda: print('blas threads:', "
              "os.environ.get('OPENBLAS_NUM_THREADS'), 'frozen:', gc.get_freeze_count())); "
              "sys.argv[0] = 'profkit'; from profkit.cli import main; main()")


@pytest.mark.parametrize("given, expected", [(None, "1"), ("3", "3")])
def test_the_program_asks_for_no_blas_threads_and_freezes_its_imports(tmp_path, given,
                                                                        expected):
    """An idle OpenBLAS thread spins after numpy's import (CPU the pool's workers want); the
    analysis does no matrix products, so the program asks for none, before numpy is
    imported. A number the user set is kept."""
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    proc = subprocess.run([sys.executable, "-c", BLAS_PROBE, "summary", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"blas threads: {expected}" in proc.stdout
    # and the program froze what its heavy imports made (test_program_imports_run_...)
    assert int(proc.stdout.split("frozen:")[1]) > 10_000


def test_program_imports_run_without_the_collector_then_freeze(monkeypatch):
    """As the program, a command's heavy imports run with the cyclic GC off (it re-walked
    every new module's objects ~160 times), and what they made is frozen afterwards; an
    error inside still turns it back on. As a library (main(argv), notebooks), the
    caller's collector is left alone."""
    import gc

    from profkit.cli import options

    before = gc.get_freeze_count()
    with options.imports():  # a library caller: nothing changes
        assert gc.isenabled()
    assert gc.get_freeze_count() == before
    monkeypatch.setattr(options, "_PROGRAM", [True])
    try:
        with options.imports():
            assert not gc.isenabled()
            made = [[] for _ in range(100)]
        assert gc.isenabled() and gc.get_freeze_count() >= before + len(made)
        with pytest.raises(ValueError), options.imports():
            raise ValueError
        assert gc.isenabled()
    finally:
        gc.unfreeze()  # the test process is no program: let its collector see them again
