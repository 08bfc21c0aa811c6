#!/usr/bin/env python
"""Read-to-columns time of one trace: the native reader, the pure-Python reader and the
``orjson.loads`` floor, side by side.

    python bench/native_read_bench.py TRACE [--repeat 3]

Every measurement runs in a fresh child process, the stages alternating, ``--repeat`` times
each; it prints the CPU seconds of the measured operation (after imports; ``process_time``)
as the minimum and median of the repeats, and the child's peak RSS (``ru_maxrss``, max over
the repeats). Rows:

* ``read``            the file's JSON bytes (gunzipped for .json.gz, with the ratio check)
* ``orjson.loads``    read + ``orjson.loads`` (the faster of with and without ``gc.disable``)
* ``native columns``  read + ``tracefile.decode`` + ``accumulate`` + the events table
* ``native load (streamed) + columns``  the same as profkit reads a rank: ``tracefile.load``
  scans the file as it is read or gunzipped, never holding its JSON whole
* ``python columns``  the same with ``PROFKIT_PURE_PYTHON=1`` (the pure-Python reader)
* ``native tables`` / ``python tables``  read + ``ingest.build_tables`` (every rank table)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
READ = "from profkit.trace.readlimit import read_trace_bytes; raw = read_trace_bytes(PATH)"
STAGES = {
    "read": (READ, False),
    "orjson.loads": (READ + "; import orjson; orjson.loads(raw)", False),
    "orjson.loads (gc off)": ("import gc, orjson; gc.disable(); " + READ
                              + "; orjson.loads(raw)", False),
    "native columns": (READ + "; from profkit.trace import tracefile, accumulate as A; "
                       "A.accumulate(tracefile.decode(PATH, raw)).frame()", False),
    "native load (streamed) + columns": (
        "from profkit.trace import tracefile, accumulate as A; "
        "A.accumulate(tracefile.load(PATH)).frame()", False),
    "python columns": (READ + "; from profkit.trace import tracefile, accumulate as A; "
                       "A.accumulate(tracefile.decode(PATH, raw)).frame()", True),
    "native tables": (READ + "; from profkit.trace import tracefile, ingest; "
                      "ingest.build_tables(tracefile.decode(PATH, raw))", False),
    "python tables": (READ + "; from profkit.trace import tracefile, ingest; "
                      "ingest.build_tables(tracefile.decode(PATH, raw))", True),
}
CHILD = """
import resource, sys, time
PATH = sys.argv[1]
import numpy, pandas, orjson, msgspec, profkit.trace.ingest  # imports are not timed
t0 = time.process_time()
{op}
cpu = time.process_time() - t0
print(cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure(stage: str, path: Path) -> tuple[float, int]:
    op, pure = STAGES[stage]
    env = {**os.environ, "PROFKIT_PURE_PYTHON": "1" if pure else "0"}
    out = subprocess.run([sys.executable, "-c", CHILD.format(op=op), str(path)], env=env,
                         capture_output=True, text=True, check=True, cwd=ROOT)
    cpu, rss_kib = out.stdout.split()[-2:]
    return float(cpu), int(rss_kib)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from profkit.trace import native
    if not native.available():
        sys.exit("the native reader is not built here (pip install -e . with a C compiler)")
    times: dict[str, list[float]] = {s: [] for s in STAGES}
    peaks: dict[str, int] = dict.fromkeys(STAGES, 0)
    for r in range(args.repeat):
        for stage in (STAGES if r % 2 == 0 else reversed(list(STAGES))):  # alternate the order
            cpu, rss = measure(stage, args.trace)
            times[stage].append(cpu)
            peaks[stage] = max(peaks[stage], rss)
    floor = min(min(times["orjson.loads"]), min(times["orjson.loads (gc off)"]))
    size_mb = len(_raw(args.trace)) / 1e6
    print(f"{args.trace}: {size_mb:.1f} MB of JSON, {args.repeat} repeats, fresh process each")
    print(f"{'stage':34} {'min CPU s':>10} {'median':>8} {'x orjson':>9} {'peak MiB':>9}")
    for stage in STAGES:
        best = min(times[stage])
        print(f"{stage:34} {best:10.3f} {statistics.median(times[stage]):8.3f} "
              f"{best / floor:9.2f} {peaks[stage] / 1024:9.0f}")


def _raw(path: Path) -> bytes:
    from profkit.trace.readlimit import read_trace_bytes
    return read_trace_bytes(path)


if __name__ == "__main__":
    main()
