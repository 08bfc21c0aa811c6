"""Slim a captured trace for shipping under samples/runs (each file under ~2 MB compressed).

    python samples/slim_trace.py TRACE.json.gz [...] [--drop flows,memory]

Removes, in place, events the case does not need: ``flows`` (the ``ac2g`` launch-to-kernel
flow arrows: the kernels' ``correlation`` args link them already) and ``memory`` (the
allocator's ``[memory]`` instant events: no memory analysis on that run). Every kept event
and every other key is written back byte for byte as the profiler wrote it (no number goes
through a float), recompressed at gzip level 9. Prints the sizes before and after. What was
removed is said in samples/runs/README.md beside the run.
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import msgspec


class _Head(msgspec.Struct):
    """What a filter reads of an event; everything else stays raw."""

    ph: str = ""
    cat: str = ""
    name: str = ""


DROPS = {
    "flows": lambda e: e.cat == "ac2g",
    "memory": lambda e: e.ph == "i" and e.name == "[memory]",
}
_HEAD = msgspec.json.Decoder(_Head)


def slim_bytes(raw: bytes, drops: list[str]) -> bytes:
    """The trace's JSON without the dropped events, the rest as written."""
    doc = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
    events = msgspec.json.decode(doc["traceEvents"], type=list[msgspec.Raw])
    kept = [bytes(e) for e in events if not any(DROPS[d](_HEAD.decode(e)) for d in drops)]
    parts = [msgspec.json.encode(k) + b":" + (b"[" + b",".join(kept) + b"]"
                                              if k == "traceEvents" else bytes(v))
             for k, v in doc.items()]
    return b"{" + b",".join(parts) + b"}"


def slim(path: Path, drops: list[str]) -> tuple[int, int]:
    before = path.stat().st_size
    out = gzip.compress(slim_bytes(gzip.decompress(path.read_bytes()), drops), 9, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(out)
    os.replace(tmp, path)
    return before, len(out)


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
