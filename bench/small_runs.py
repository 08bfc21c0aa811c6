#!/usr/bin/env python
"""What one analysis of a small run costs: the fixed part that the test suite, the
dashboard's Runs page and every small job pay, against another checkout in the same run.

    python bench/small_runs.py [RUN ...] [--repeat 5] [--pairs 3] [--base-python PY]

Each run (default: a few bundled sample runs of different kinds) is analysed in one
process as the tests do (``analyze_run(run, cache=False, workers=1)``, after one warm-up
analysis that pays the imports), ``--repeat`` times; the row is the process CPU seconds per
analysis. With ``--base-python`` (the interpreter of another checkout's venv, with that
checkout installed), the same script runs under it at the same time, one process per core,
``--pairs`` times: both sides see the same machine load, so the ratio of each pair cancels
the drift of a shared VM that separate runs would not. Run it from outside the checkout
(``cd /tmp``) so that each interpreter imports its own ``profkit``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ("samples/runs/stock_ddp", "samples/runs/zoo/straggler",
                "samples/runs/profkit_fsdp", "samples/runs/why/eltwise_chain",
                "tests/data/public/vllm_decode_replay")


def measure(runs: list[str], repeat: int) -> dict[str, float]:
    """CPU seconds per analysis of each run, in this process."""
    from profkit.analyzers.executor import analyze_run

    out = {}
    for run in runs:
        analyze_run(run, cache=False, workers=1)
        start = time.process_time()
        for _ in range(repeat):
            analyze_run(run, cache=False, workers=1)
        out[run] = (time.process_time() - start) / repeat
    return out


def _child(python: str, runs: list[str], repeat: int) -> subprocess.Popen:
    cmd = [python, str(Path(__file__).resolve()), "--child", "--repeat", str(repeat), *runs]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", help="run folders or trace files (default: a few samples)")
    ap.add_argument("--repeat", type=int, default=5, help="analyses of each run per process")
    ap.add_argument("--pairs", type=int, default=3, help="paired processes with --base-python")
    ap.add_argument("--base-python", help="interpreter of the checkout to compare with")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    runs = [str(Path(r).resolve()) for r in args.runs] or [str(REPO / r) for r in DEFAULT_RUNS]
    if args.child:
        print(json.dumps(measure(runs, args.repeat)))
        return 0
    sides = {"this": sys.executable, **({"base": args.base_python} if args.base_python else {})}
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for _ in range(args.pairs if args.base_python else 1):
        procs: dict[str, subprocess.Popen] = {}
        try:
            for side, py in sides.items():
                procs[side] = _child(py, runs, args.repeat)
        except OSError as exc:
            for proc in procs.values():
                proc.kill()
            raise SystemExit(f"cannot start {py}: {exc}") from None
        for side, proc in procs.items():
            out, _ = proc.communicate()
            if proc.returncode:
                raise SystemExit(f"{side} ({sides[side]}) failed with exit code {proc.returncode}")
            results[side].append(json.loads(out))
    print(f"CPU s per analysis, median of {len(results['this'])} process(es) x {args.repeat}")
    head = "| run | this |" + (" base | this / base |" if args.base_python else "")
    print(head + "\n|---|---:|" + ("---:|---:|" if args.base_python else ""))
    for run in runs:
        this = statistics.median(r[run] for r in results["this"])
        row = f"| {Path(run).relative_to(REPO) if Path(run).is_relative_to(REPO) else run} | {this:.3f} |"
        if args.base_python:
            base = statistics.median(r[run] for r in results["base"])
            row += f" {base:.3f} | {this / base:.2f} |"
        print(row)
    if args.base_python:
        ratios = [sum(t.values()) / sum(b.values()) for t, b in zip(results["this"], results["base"])]
        print("all runs, this / base per pair: " + ", ".join(f"{r:.2f}" for r in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
