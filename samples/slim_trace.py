"""Slim a captured trace for shipping under samples/runs (each file under ~2 MB compressed).

    python samples/slim_trace.py TRACE.json.gz [--drop flows,memory]

Removes, in place, events the case does not need: ``flows`` (the ``ac2g`` launch-to-kernel
flow arrows: the kernels' ``correlation`` args link them already) and ``memory`` (the
allocator's ``[memory]`` instant events: no memory analysis on that run). Prints the sizes
before and after. What was removed is said in samples/runs/README.md beside the run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

DROPS = {
    "flows": lambda e: e.get("cat") == "ac2g",
    "memory": lambda e: e.get("ph") == "i" and e.get("name") == "[memory]",
}


def slim(path: Path, drops: list[str]) -> tuple[int, int]:
    before = path.stat().st_size
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not any(DROPS[d](e) for d in drops)]
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", compresslevel=9) as f:
        json.dump(trace, f, separators=(",", ":"))
    os.replace(tmp, path)
    return before, path.stat().st_size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--drop", default="flows,memory")
    args = p.parse_args()
    for t in args.traces:
        before, after = slim(t, args.drop.split(","))
        print(f"{t}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
