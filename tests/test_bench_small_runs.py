"""bench/small_runs.py runs and prints its table, against a 'base' that is this checkout
too (so each pair's ratio is near 1, and a broken child fails the run)."""

import subprocess
import sys

from tests.conftest import REPO
from tests.factories import trace_doc, write_trace


def test_small_runs_prints_each_run_beside_the_base(tmp_path):
    for rank in (0, 1):
        write_trace(tmp_path / "run" / f"rank{rank}.json", trace_doc(rank))
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "small_runs.py"), str(tmp_path / "run"),
         "--repeat", "1", "--pairs", "1", "--base-python", sys.executable],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith(f"| {tmp_path}"))
    this, base, ratio = (float(cell) for cell in row.strip("| ").split(" | ")[1:])
    assert this > 0 and base > 0 and abs(ratio - this / base) < 0.01
    assert "this / base per pair: " in out.stdout
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "small_runs.py"),
                          str(tmp_path / "run"), "--base-python", "/nonexistent/python"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert bad.returncode != 0 and "cannot start /nonexistent/python" in bad.stderr
