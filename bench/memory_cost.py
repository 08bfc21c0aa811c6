"""What reading the allocator's ``[memory]`` events costs a cold ``profkit analyze``.

    python bench/make_big_run.py samples/runs/memory/gpt_b32/traces /tmp/memrun --target-mb 150
    python bench/memory_cost.py /tmp/memrun --repeat 3

Runs ``profkit analyze RUN --no-cache --format json`` in fresh interpreters, alternating the
normal program with one whose memory reader drops every batch (the floor: the same parse and
analysis without the memory table), and prints the medians and the difference as a share of
the cold analysis. Alternating keeps the two rows under the same machine load.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

WITHOUT = ("import profkit.trace.memorysamples as m; "
           "m.MemorySamples.add = lambda self, events: None; ")
ANALYZE = ("import sys; from profkit.cli import main; "
           "sys.exit(main(['analyze', {run!r}, '--no-cache', '--format', 'json']))")


def timed(python: str, code: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/")
    if proc.returncode not in (0, 1):  # 1: the analysis found a problem, still a full run
        raise SystemExit(f"analyze exited {proc.returncode}: {proc.stderr[-800:]}")
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="interpreter with profkit")
    args = ap.parse_args(argv)
    code = ANALYZE.format(run=args.run_dir)
    rows: dict[str, list[float]] = {"with [memory] events": [], "without (floor)": []}
    for _ in range(args.repeat):
        rows["with [memory] events"].append(timed(args.python, code))
        rows["without (floor)"].append(timed(args.python, WITHOUT + code))
    print(f"{'cold analyze':<22} {'median s':>9}  repeats")
    for name, times in rows.items():
        print(f"{name:<22} {statistics.median(times):>9.2f}  "
              + " ".join(f"{t:.2f}" for t in times))
    with_s, floor_s = (statistics.median(t) for t in rows.values())
    print(f"memory events: {100 * (with_s - floor_s) / with_s:+.1f}% of the cold analysis "
          f"(ratio {with_s / floor_s:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
