#!/usr/bin/env python
"""Peak memory and CPU of reading one rank, stage by stage.

    python bench/rank_peak_bench.py TRACE [TRACE ...] [--repeat 3] [--base SRC_DIR]

Each measurement runs in a fresh child process (the traces, and with ``--base`` the two
versions, alternating, ``--repeat`` times each; ``SRC_DIR``: profkit's sources from before a
change, ``git archive COMMIT | tar -x -C SRC_DIR`` with its native reader built in place,
imported through ``PYTHONPATH``). The child imports profkit's reader and analysis, notes its RSS (the interpreter with
numpy and pandas: the baseline), then runs the stages of a pool worker's
``loader.ingest_file`` one by one, resetting the kernel's peak RSS (VmHWM, through
``/proc/self/clear_refs``) before each, so that each stage's own peak is read:

* ``load``    read the file (gunzip) and scan or split it (``tracefile.load``)
* ``tables``  every rank table (``ingest.build_tables``), the trace released on the way

It prints, per trace, the minimum and median over the repeats of the CPU seconds
(``process_time``) and of the peaks (MiB), and the peak as a multiple of the trace's JSON
size: whole (peak RSS / JSON bytes) and above the baseline ((peak - baseline) / JSON bytes).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, time
import numpy, pandas, orjson, msgspec
from profkit.trace import ingest, tracefile
from profkit.run import loader  # noqa: F401 (imports are not measured)

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

out = {"baseline": status("VmRSS")}
reset_peak()
t0 = time.process_time()
trace = tracefile.load(sys.argv[1])
out["load_cpu"] = time.process_time() - t0
out["load_peak"] = status("VmHWM")
out["after_load"] = status("VmRSS")
reset_peak()
t1 = time.process_time()
tables = ingest.build_tables(trace)
out["tables_cpu"] = time.process_time() - t1
out["tables_peak"] = status("VmHWM")
out["cpu"] = time.process_time() - t0
out["peak"] = max(out["load_peak"], out["tables_peak"])
print(json.dumps(out))
"""
MIB = 1 << 20


def json_bytes(path: Path) -> int:
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n


def measure(python: str, path: Path, src: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([python, "-c", CHILD, str(path)], capture_output=True, text=True,
                          cwd="/", env=env)
    if proc.returncode:
        raise SystemExit(f"{path}: child failed: {proc.stderr[-800:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="interpreter with profkit")
    ap.add_argument("--base", type=Path, help="profkit sources before a change")
    args = ap.parse_args(argv)
    sides = [("this", ROOT)] + ([("base", args.base)] if args.base else [])
    keys = [(side, src, p) for p in args.traces for side, src in sides]
    runs: dict[tuple, list[dict]] = {(side, p): [] for side, _, p in keys}
    for r in range(args.repeat):
        for side, src, path in (keys if r % 2 == 0 else keys[::-1]):
            runs[side, path].append(measure(args.python, path, src))
    print(f"load: {os.getloadavg()[0]:.1f} (1-min load average at the end)")
    print(f"{'version':<5} {'trace':<30} {'stage':<7} {'CPU s min/med':>14} "
          f"{'peak MiB min/med':>17} {'x JSON':>7} {'x JSON above base':>18}")
    for (side, path), rows in runs.items():
        size = json_bytes(path)
        base = statistics.median(r["baseline"] for r in rows)
        for stage, cpu, peak in (("load", "load_cpu", "load_peak"),
                                 ("tables", "tables_cpu", "tables_peak"),
                                 ("both", "cpu", "peak")):
            cpus = [r[cpu] for r in rows]
            peaks = [r[peak] for r in rows]
            med = statistics.median(peaks)
            print(f"{side:<5} {str(path)[-30:]:<30} {stage:<7} "
                  f"{min(cpus):>6.3f}/{statistics.median(cpus):<7.3f}"
                  f" {min(peaks) / MIB:>8.0f}/{med / MIB:<8.0f} {med / size:>7.2f} "
                  f"{(med - base) / size:>18.2f}")
        print(f"{'':<36} JSON {size / MIB:.1f} MiB, baseline RSS {base / MIB:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
