#!/usr/bin/env python
"""Where the default test run spends the machine's CPU, by kind of process.

    python bench/suite_cpu.py [--interval-s 0.1] [-- PYTEST ARGS...]

Runs ``python -m pytest`` (the README's default run, with any extra arguments) in this
checkout and, while it runs, reads every process's CPU time from /proc every
``--interval-s``. Each process is put in one class by its command line (:func:`classify`):
the pytest-xdist workers (the tests that run in-process: analyses, loaders, figures), the
headless chromium and playwright driver of the browser tests, the dashboard servers those
tests start, the ``profkit`` commands tests run as subprocesses, multiprocessing children,
and every other subprocess (training jobs, torchrun, scripts). It prints one table: CPU
seconds per class and its share, beside the machine's busy CPU from /proc/stat (the
difference: processes that lived less than one interval, and CPU spent after a process's
last sample, which no sample saw).

The test run's wall time times the cores is the ceiling: a run whose CPU seconds are close
to it is CPU-bound and becomes faster only with less work, not with more workers. Linux only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchlib import _cpu_busy_s, _descendants  # noqa: E402  (the shared /proc readers)

REPO = Path(__file__).resolve().parents[1]
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
XDIST_WORKER = "exec(eval(sys.stdin.readline()))"  # how execnet starts a worker


def classify(argv: list[str]) -> str | None:
    """The class of a process from its argv (None: not part of the test run)."""
    if not argv:
        return None
    line = " ".join(argv)
    exe = os.path.basename(argv[0])
    if "chrom" in exe or "headless_shell" in exe:
        return "chromium (browser tests)"
    if exe == "node" or ("playwright" in line and "driver" in line):
        return "playwright driver"
    if "multiprocessing" in line and ("spawn_main" in line or "forkserver" in line
                                      or "resource_tracker" in line):
        return "multiprocessing children"
    if XDIST_WORKER in line:
        return "xdist workers (in-process tests)"
    if "profkit dashboard" in line:
        return "dashboard servers (browser tests)"
    if "-m profkit" in line or exe == "profkit":
        return "profkit commands (subprocesses)"
    if "pytest" in exe or "-m pytest" in line:
        return "pytest controller"
    if exe.startswith("python") or exe in ("torchrun", "bash", "sh"):
        return "other subprocesses (jobs, scripts)"
    return None


def _stat(pid: int) -> tuple[tuple[int, str], float] | None:
    """((pid, start time), CPU seconds) of a process, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (pid, fields[19]), (int(fields[11]) + int(fields[12])) * TICK_S


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def measure(cmd: list[str], interval_s: float,
            by_command: Counter | None = None) -> tuple[Counter, float, float, int]:
    """(CPU s per class, wall s, machine busy s, exit code) of running ``cmd``: the CPU of
    ``cmd`` and its descendants at each sample (one that detaches to init is not followed).
    ``by_command``, if given, gets the CPU s of each command line (cut to 120 characters)
    added to it."""
    seen: dict[tuple[int, str], float] = {}
    argvs: dict[tuple[int, str], list[str]] = {}
    busy0, start = _cpu_busy_s(), time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO)
    while proc.poll() is None:
        for key, cpu_s in filter(None, map(_stat, _descendants(proc.pid))):
            argv = _argv(key[0])  # read again each time: a child forked from a worker
            if argv:  # holds the worker's command line until it execs its own
                argvs[key] = argv
            seen[key] = cpu_s
        time.sleep(interval_s)
    wall_s, busy_s = time.monotonic() - start, _cpu_busy_s() - busy0
    by_class: Counter = Counter()
    for key, cpu_s in seen.items():
        name = classify(argvs.get(key, []))
        if name:
            by_class[name] += cpu_s
            if by_command is not None:
                by_command[" ".join(argvs[key])[:120]] += cpu_s
    return by_class, wall_s, busy_s, proc.returncode


def table(by_class: Counter, wall_s: float, busy_s: float) -> str:
    cores = os.cpu_count() or 1
    seen_s = sum(by_class.values())
    rows = [f"test run: {wall_s:.0f} s wall on {cores} cores (ceiling {wall_s * cores:.0f} CPU s); "
            f"machine busy {busy_s:.0f} CPU s ({busy_s / wall_s:.2f} cores on average)", "",
            "| process class | CPU s | share of the sampled |", "| --- | ---: | ---: |"]
    for name, cpu_s in by_class.most_common():
        rows.append(f"| {name} | {cpu_s:.0f} | {cpu_s / max(seen_s, 1e-9):.0%} |")
    rows.append(f"| sampled, all classes | {seen_s:.0f} | 100% |")
    rows.append(f"| not seen by a sample (short-lived, last interval, other load) | "
                f"{max(busy_s - seen_s, 0):.0f} | |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval-s", type=float, default=0.1)
    ap.add_argument("--top", type=int, default=0, metavar="N",
                    help="also list the N command lines that used the most CPU")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = ap.parse_args(argv)
    by_command: Counter = Counter()
    by_class, wall_s, busy_s, code = measure(
        [sys.executable, "-m", "pytest", "-q", *args.pytest_args], args.interval_s, by_command)
    print(table(by_class, wall_s, busy_s))
    if args.top:
        print("\n| command line | CPU s |\n| --- | ---: |")
        for text, cpu_s in by_command.most_common(args.top):
            print(f"| `{text}` | {cpu_s:.1f} |")
    return code


if __name__ == "__main__":
    sys.exit(main())
