"""bench/suite_cpu.py: the process classes, read from command lines seen on a test run,
and a real measurement of a child that burns a known amount of CPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "suite_cpu", Path(__file__).resolve().parents[1] / "bench" / "suite_cpu.py")
suite_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_cpu)

PY = "/work/main/.venv/bin/python"
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass"


@pytest.mark.parametrize("argv, expected", [
    ([PY, "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"],
     "xdist workers (in-process tests)"),
    (["/usr/lib/chromium/chromium", "--type=renderer", "--lang=en-US"], "chromium (browser tests)"),
    (["/usr/lib/chromium/chrome_crashpad_handler", "--monitor-self"], "chromium (browser tests)"),
    ([PY, "-m", "profkit", "dashboard", "--port", "4100", "--no-background"],
     "dashboard servers (browser tests)"),
    ([PY, "-m", "profkit", "analyze", "/tmp/pytest-of-root/pytest-3/run", "--no-cache"],
     "profkit commands (subprocesses)"),
    (["/work/main/.venv/bin/profkit", "merge", "run"], "profkit commands (subprocesses)"),
    ([PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"],
     "multiprocessing children"),
    ([PY, "-m", "pytest", "-q"], "pytest controller"),
    ([PY, "samples/train_gpt.py", "--steps", "3"], "other subprocesses (jobs, scripts)"),
    (["/usr/bin/sleep", "1"], None),
    ([], None),
])
def test_each_process_of_a_test_run_gets_its_class(argv, expected):
    assert suite_cpu.classify(argv) == expected


def test_a_child_burning_half_a_second_is_measured_in_its_class():
    burn = BURN.format(0.5)
    by_command = Counter()
    by_class, wall_s, busy_s, code = suite_cpu.measure([sys.executable, "-c", burn], 0.02,
                                                       by_command)
    assert code == 0
    cpu_s = by_class["other subprocesses (jobs, scripts)"]
    assert 0.4 <= cpu_s <= 0.8  # the 0.5 s burnt, plus start-up; less only what no sample saw
    assert busy_s >= cpu_s * 0.9 and wall_s >= 0.5
    assert by_command == {f"{sys.executable} -c {burn}"[:120]: cpu_s}


def test_the_table_shares_and_the_unseen_remainder():
    text = suite_cpu.table(Counter({"a": 30.0, "b": 10.0}), wall_s=20.0, busy_s=50.0)
    assert "| a | 30 | 75% |" in text and "| b | 10 | 25% |" in text
    assert "| sampled, all classes | 40 | 100% |" in text
    assert "other load) | 10 |" in text  # 50 busy - 40 seen
    assert "2.50 cores on average" in text


def test_a_process_outside_the_measured_command_is_not_counted():
    bystander = subprocess.Popen([sys.executable, "-c", BURN.format(1.5)])
    try:
        by_class, _, _, code = suite_cpu.measure([sys.executable, "-c", BURN.format(0.3)], 0.02)
    finally:
        bystander.wait()
    assert code == 0
    assert 0.2 <= sum(by_class.values()) <= 0.6  # the 0.3 s child, not the 1.5 s bystander
