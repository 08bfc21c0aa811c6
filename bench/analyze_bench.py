"""Full ``profkit analyze`` against Holistic Trace Analysis on the same run.

    python bench/make_big_run.py samples/runs/stock_ddp/rank0.*.json.gz \\
        samples/runs/stock_ddp/rank1.*.json.gz /tmp/run75 --ranks 2 --target-mb 75
    python bench/analyze_bench.py /tmp/run75 [--repeat 3] [--hta-repeat 2]

Rows (each a fresh process; wall = the whole command, start-up included):
- profkit cold: ``profkit analyze RUN --no-cache --format json``: ingest, every analyzer, report;
- profkit cached: the same with the ingest cache present;
- HTA: ``TraceAnalysis(trace_dir)`` plus its temporal, idle-time and communication-overlap
  breakdowns, the closest HTA equivalent of profkit's step breakdown.
Targets (from the analyzers issue): cold >= 5x faster than HTA, cached >= 20x.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import ingest_bench as ib  # noqa: E402  (the shared child-process measuring code)

HTA_ANALYSIS = """
import logging, sys, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
a.get_idle_time_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-repeat", type=int, default=2)
    ap.add_argument("--hta-venv", type=Path, default=Path(__file__).parent / ".venv-hta")
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    files = ib.rank_files(args.run)
    work = Path(tempfile.mkdtemp(prefix="profkit-analyze-bench-"))
    out = work / "analysis.json"
    base = [sys.executable, "-m", "profkit", "analyze", str(args.run), "--format", "json", "-o", str(out)]
    cold = ib.measure(ib.Row("cold", "profkit analyze --no-cache"), base + ["--no-cache"],
                      args.repeat, args.timeout, 0.05, wall_from_child=False)
    ib.run_child(base, args.timeout, 0.05)  # build the cache
    cached = ib.measure(ib.Row("cached", "profkit analyze (cached)"), base, args.repeat,
                        args.timeout, 0.05, wall_from_child=False)
    hta_python, note = ib.ensure_hta_venv(args.hta_venv)
    rows = [cold, cached]
    if hta_python is not None:
        hta_dir = ib.hta_dir_for(files, work)
        rows.append(ib.measure(ib.Row("hta", "HTA load + temporal/idle/overlap"),
                               [str(hta_python), "-c", HTA_ANALYSIS, str(hta_dir)],
                               args.hta_repeat, args.timeout, 0.05, wall_from_child=False))
    else:
        print(f"HTA not run: {note}")
    total = sum(ib.json_bytes(f) for f in files)
    print(f"\nrun: {args.run}: {len(files)} rank(s), {total / 1e6:.1f} MB JSON; "
          f"machine: {ib.machine_info()}")
    print("| measurement | wall s | best s | peak MiB | HTA / this |\n|---|---:|---:|---:|---:|")
    hta = rows[2] if len(rows) > 2 and rows[2].ok else None
    for r in rows:
        ratio = f"{hta.wall / r.wall:.1f}x" if hta and r.ok else "n/a"
        wall = f"{r.wall:.2f}" if r.ok else f"failed: {r.error}"
        best = f"{r.best:.2f}" if r.ok else ""
        peak = f"{r.peak:,.0f}" if r.ok else ""
        print(f"| {r.label} | {wall} | {best} | {peak} | {ratio} |")
    if hta:
        for name, row, target in (("cold", cold, 5), ("cached", cached, 20)):
            got = hta.wall / row.wall
            print(f"target {name} >= {target}x faster than HTA: {got:.1f}x "
                  f"{'PASS' if got >= target else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
