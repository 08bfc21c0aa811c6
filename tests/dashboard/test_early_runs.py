"""The first named run's analysis, started before Dash is loaded (server/early_runs.py): the
result cache shows what it kept, without analysing the run a second time, and the same
analysis as ``analyze_run`` makes in this process."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.dashboard.conftest import REPO

RUN = REPO / "samples" / "runs" / "stock_ddp"
# in a fresh process, as `profkit dashboard RUN` does it: the forkserver chosen but not
# started, the run's analysis forked while the process has one thread; then the result
# cache with the server's own analysis made impossible
SCRIPT = """
import json, sys, threading
from pathlib import Path
from profkit import children
children.start_workers_by("forkserver", (), start_now=False)
from profkit.dashboard.server import early_runs
assert threading.active_count() == 1
assert early_runs.start([Path(sys.argv[1])])
assert early_runs.running()  # (the warm-up of the figures waits for it)
from profkit.dashboard.server import loading
from profkit.dashboard.server.registry import RunRegistry
from profkit.dashboard.server.results import ResultCache
def never(path):
    raise AssertionError("analysed again in the server")
loading.show = never
results = ResultCache(RunRegistry([Path(sys.argv[1])], []))
key = results.registry.entries()[0].key
a = results.analysis(key)
second = early_runs.wait(Path(sys.argv[1]).resolve())[0]  # waits, if it was not asked
assert not early_runs.running()
print(json.dumps({"primary": a.verdict.get("primary"), "fractions": a.verdict.get("fractions"),
                  "ranks": a.run["ranks_analyzed"], "second": second}))
"""


@pytest.fixture
def run_copy(tmp_path):
    if not RUN.is_dir():
        pytest.skip("the bundled sample runs are absent")
    return shutil.copytree(RUN, tmp_path / "run", ignore=shutil.ignore_patterns(".profkit"))


def test_the_result_cache_shows_the_early_analysis_without_analysing_again(run_copy):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(run_copy)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    from profkit.analyzers.executor import analyze_run

    here = analyze_run(RUN, cache=False, workers=1)  # independently, in this process
    assert shown["primary"] == here.verdict["primary"] is not None
    assert shown["fractions"] == pytest.approx(here.verdict["fractions"])
    assert shown["ranks"] == here.run["ranks_analyzed"] and len(shown["ranks"]) >= 2
    assert shown["second"] is False  # used once: a later look analyses as usual


def test_a_run_kept_already_is_not_analysed_again(run_copy):
    """The second start of the dashboard on the same run: the early analysis finds the
    result kept by the first and leaves it (it was analysed again, the file rewritten)."""
    first = subprocess.run([sys.executable, "-c", SCRIPT, str(run_copy)], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    kept = sorted((run_copy / ".profkit" / "cache").glob("result-*.data"))
    assert len(kept) == 1
    written_ns = kept[0].stat().st_mtime_ns
    again = subprocess.run([sys.executable, "-c", SCRIPT, str(run_copy)], cwd=REPO,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    shown = [json.loads(done.stdout.strip().splitlines()[-1]) for done in (first, again)]
    for seen in shown:
        seen.pop("second")  # the second's result cache reads the kept one before it asks
    assert shown[1] == shown[0]
    assert kept[0].stat().st_mtime_ns == written_ns

