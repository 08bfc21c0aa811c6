import subprocess
import sys

import pytest

from profkit.cli import build_parser, main, parse_ranks
from tests.factories import trace_doc, write_trace

SUBCOMMANDS = ("merge", "summary", "analyze", "diff", "launch", "dashboard")


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

    from profkit import cache

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
