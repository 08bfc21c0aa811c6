"""Full ``profkit analyze`` against Holistic Trace Analysis on the same run (issue 15).

    python bench/make_big_run.py samples/runs/stock_ddp_stack /tmp/run75 --ranks 2 --target-mb 75
    python bench/analyze_bench.py /tmp/run75 [--repeat 3] [--base-python /work/base/.venv/bin/python]

Rows (each a fresh process; wall = the whole command, interpreter start included; peak =
summed RSS of the process tree, workers included, sampled every 50 ms):
- profkit cold: ``profkit analyze RUN --no-cache --format json`` (ingest, every analyzer,
  the report), with the default workers and with ``--workers 1``;
- base cold (optional): the same command with another checkout's interpreter;
- HTA: ``TraceAnalysis(trace_dir)`` plus its temporal, idle-time and communication-overlap
  breakdowns, the closest HTA equivalent of profkit's step breakdown;
- profkit cached: the same command again on the unchanged run (report cache present);
- the floor: a whole ``python`` process that reads every rank file and ``orjson.loads`` it
  (garbage collector off), one process per rank as profkit's pool does, and all ranks in one
  process as ``--workers 1`` does. No loader in Python parses JSON faster than this.
The cold rows, the floors and HTA alternate (one repeat of each in turn); wall is the
median, best the minimum. Targets: cold >= 10x faster than HTA, cold peak <= 0.5x HTA's,
cached >= 30x, and the pool costing no more CPU than one process doing the same work.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import benchlib as bl  # noqa: E402  (the shared child-process measuring code)

HTA_ANALYSIS = """
import logging, sys, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
"""
FLOOR = bl.FLOOR_PARSE + """
import os, sys
if __name__ == "__main__":
    files, per_rank = sys.argv[2:], sys.argv[1] == "pool"
    if per_rank and len(files) > 1:
        with ProcessPoolExecutor(min(len(files), os.cpu_count() or 1)) as pool:
            sum(pool.map(parse, files))
    else:
        sum(map(parse, files))
"""
TARGETS = (("cold", "faster", 10.0), ("cold", "memory", 0.5), ("cached", "faster", 30.0))


def _commands(args, out: Path) -> dict[str, list[str]]:
    def analyze(python: str, *extra: str) -> list[str]:
        return [python, "-m", "profkit", "analyze", str(args.run), "--format", "json",
                "-o", str(out), *extra]

    cmds = {"cold": analyze(sys.executable, "--no-cache"),
            "cold1": analyze(sys.executable, "--no-cache", "--workers", "1")}
    if args.base_python:
        cmds["base"] = analyze(args.base_python, "--no-cache")
    files = [str(f) for f in bl.rank_files(args.run)]
    cmds["floor"] = [sys.executable, "-c", FLOOR, "pool", *files]
    cmds["floor1"] = [sys.executable, "-c", FLOOR, "one", *files]
    hta_python, note = bl.ensure_hta_venv(args.hta_venv)
    if hta_python is not None:
        hta_dir = bl.hta_dir_for(bl.rank_files(args.run), out.parent)
        cmds["hta"] = [str(hta_python), "-c", HTA_ANALYSIS, str(hta_dir)]
    else:
        print(f"HTA not run: {note}")
    return cmds


LABELS = {"cold": "profkit analyze --no-cache", "cold1": "profkit analyze --no-cache --workers 1",
          "base": "base checkout, analyze --no-cache", "hta": "HTA load + temporal/idle/overlap",
          "cached": "profkit analyze (cached)",
          "floor": "floor: read + orjson.loads, 1 process per rank",
          "floor1": "floor: read + orjson.loads, 1 process"}
FLOOR_OF = {"cold": "floor", "cold1": "floor1", "base": "floor"}  # the floor each row compares to


def run_rows(args) -> dict[str, bl.Row]:
    out = Path(tempfile.mkdtemp(prefix="profkit-analyze-bench-")) / "analysis.json"
    cmds = _commands(args, out)
    for python in {cmds["cold"][0], *([args.base_python] if args.base_python else [])}:
        print(bl.compile_profkit(python))
    rows = {key: bl.Row(key, LABELS[key]) for key in cmds}
    keys = list(cmds)
    for i in range(args.repeat):  # alternate, so that a disturbed minute hits every row,
        # each round starting one row later: no row always runs first, or after HTA's
        # gigabyte (one sitting's three rounds had the first row 0.6 s slower each time)
        for key in keys[i % len(keys):] + keys[:i % len(keys)]:
            if rows[key].error is None:
                bl.measure(rows[key], cmds[key], 1, args.timeout, 0.05, wall_from_child=False)
    cached = [a for a in cmds["cold"] if a != "--no-cache"]
    bl.run_child(cached, args.timeout, 0.05)  # builds the caches
    rows["cached"] = bl.measure(bl.Row("cached", LABELS["cached"]), cached, args.repeat,
                                args.timeout, 0.05, wall_from_child=False)
    return rows


def report(args, rows: dict[str, bl.Row]) -> None:
    files = bl.rank_files(args.run)
    total = sum(bl.json_bytes(f) for f in files)
    print(f"\nrun: {args.run}: {len(files)} rank(s), {total / 1e6:.1f} MB JSON; "
          f"machine: {bl.machine_info()}")
    hta = rows.get("hta") if rows.get("hta") and rows["hta"].ok else None
    print("| measurement | wall s | best s | cpu s | peak MiB | HTA / this (time) "
          "| this / HTA (memory) | this / floor (time) | other load, cores |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows.values():
        if not r.ok:
            print(f"| {r.label} | failed: {r.error} | | | | | | | |")
            continue
        speed = f"{hta.wall / r.wall:.1f}x" if hta else "n/a"
        memory = f"{r.peak / hta.peak:.2f}x" if hta else "n/a"
        floor = rows.get(FLOOR_OF.get(r.key, ""))
        vs_floor = f"{r.wall / floor.wall:.2f}x" if floor is not None and floor.ok else ""
        print(f"| {r.label} | {r.wall:.2f} | {r.best:.2f} | {_cpu(r):.2f} | {r.peak:,.0f} "
              f"| {speed} | {memory} | {vs_floor} | {min(r.bgs):.2f}-{max(r.bgs):.2f} |")
    if rows["cold"].ok and rows["cold1"].ok:
        ratio = _cpu(rows["cold"]) / _cpu(rows["cold1"])
        print(f"target pool cpu <= 1-process cpu: {ratio:.2f}x {'PASS' if ratio <= 1 else 'FAIL'}")
        # each round ran both (most rounds back to back): their ratio cancels the drift
        pairs = sorted(p / o for p, o in zip(rows["cold"].cpus, rows["cold1"].cpus))
        print(f"  per alternating pair: median {pairs[len(pairs) // 2]:.2f}x, "
              f"{pairs[0]:.2f}x-{pairs[-1]:.2f}x ({len(pairs)} pairs)")
    base = rows.get("base")
    if base is not None and base.ok and rows["cold"].ok:
        pairs = sorted(t / b for t, b in zip(rows["cold"].walls, base.walls))
        print(f"this / base checkout, wall per round: median {pairs[len(pairs) // 2]:.2f}x, "
              f"{pairs[0]:.2f}x-{pairs[-1]:.2f}x ({len(pairs)} rounds)")
    if hta:
        for key, what, target in TARGETS:
            row = rows[key]
            got = hta.wall / row.wall if what == "faster" else row.peak / hta.peak
            met = got >= target if what == "faster" else got <= target
            sign = ">=" if what == "faster" else "<="
            print(f"target {key} {what} {sign} {target}x HTA: {got:.2f}x {'PASS' if met else 'FAIL'}")


def _cpu(row: bl.Row) -> float:
    return sorted(row.cpus)[len(row.cpus) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--base-python", help="another checkout's interpreter, for a base row")
    ap.add_argument("--hta-venv", type=Path, default=bl.DEFAULT_HTA_VENV)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quiet-wait", type=float, default=bl.QUIET["wait"],
                    help="seconds to wait at most for the machine to settle before each "
                         "measurement (0: do not wait)")
    args = ap.parse_args()
    bl.QUIET["wait"] = args.quiet_wait
    report(args, run_rows(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
