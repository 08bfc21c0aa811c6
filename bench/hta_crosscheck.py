"""Cross-check profkit's step breakdown against Holistic Trace Analysis on the same traces.

    python bench/hta_crosscheck.py samples/runs/stock_ddp samples/runs/zoo/* [--hta-venv PATH]

HTA (in its own venv, see bench/README.md) computes per rank a temporal breakdown (compute,
non-compute, idle) and the share of communication hidden under compute. It drops the last
profiler step by default, so profkit is computed here on the same steps (all but the
last), then folded into HTA's three buckets: compute = compute; non-compute = communication
+ memcpy + copies a sync waited on; idle = every idle part. Prints one row per rank and run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

HTA_SCRIPT = """
import json, logging, sys, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
tb = a.get_temporal_breakdown(visualize=False)
ov = a.get_comm_comp_overlap(visualize=False)
out = {}
for r in tb.to_dict("records"):
    out[int(r["rank"])] = {"total_us": r["idle_time(us)"] + r["compute_time(us)"] + r["non_compute_time(us)"],
                           "compute": r["compute_time_pctg"] / 100, "non_compute": r["non_compute_time_pctg"] / 100,
                           "idle": r["idle_time_pctg"] / 100}
for r in ov.to_dict("records"):
    out.setdefault(int(r["rank"]), {})["overlap"] = r["comp_comm_overlap_pctg"] / 100
print(json.dumps(out))
"""


def hta(run_dir: Path, python: Path) -> dict[int, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(run_dir.rglob("*.json.gz")):
            if ".profkit" not in f.parts:
                shutil.copy(f, Path(tmp) / f.name)
        proc = subprocess.run([str(python), "-c", HTA_SCRIPT, tmp], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip().splitlines()[-1])
    return {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def profkit_buckets(run_dir: Path) -> dict[int, dict]:
    from profkit.analyzers.measure.breakdown import analyze_breakdown

    from profkit.run.loader import load_run

    steps = analyze_breakdown(load_run(run_dir)).tables["step_breakdown"]
    out = {}
    for rank, g in steps.groupby("rank"):
        g = g[g["step"] < g["step"].max()] if g["step"].nunique() > 1 else g  # HTA drops the last
        total = g["step_ns"].sum()
        copy = g["blocking_copy_ns"].sum()
        non_compute = g["communication"].sum() + g["memcpy"].sum() + copy
        comm_total = g["communication"].sum() + g["comm_overlap_ns"].sum()
        out[int(rank)] = {"total_us": total / 1e3, "compute": g["compute"].sum() / total,
                          "non_compute": non_compute / total,
                          "idle": 1 - (g["compute"].sum() + non_compute) / total,
                          "overlap": g["comm_overlap_ns"].sum() / comm_total if comm_total else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--hta-venv", type=Path, default=Path(__file__).parent / ".venv-hta")
    args = ap.parse_args()
    rows = []
    for run in args.runs:
        ours = profkit_buckets(run)
        try:
            theirs = hta(run, args.hta_venv / "bin" / "python")
        except RuntimeError as exc:
            print(f"{run}: HTA failed: {exc}", file=sys.stderr)
            continue
        for rank in sorted(ours):
            o, t = ours[rank], theirs.get(rank, {})
            row = {"run": str(run), "rank": rank, "window_ms profkit/HTA":
                   f"{o['total_us'] / 1e3:.2f}/{t.get('total_us', float('nan')) / 1e3:.2f}"}
            for key in ("compute", "non_compute", "idle", "overlap"):
                a, b = o.get(key), t.get(key)
                row[f"{key} profkit"] = None if a is None else round(100 * a, 1)
                row[f"{key} HTA"] = None if b is None else round(100 * b, 1)
            rows.append(row)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
