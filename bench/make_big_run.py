#!/usr/bin/env python
"""Build a large multi-rank Kineto run from real sample traces, for the ingest benchmark.

    python bench/make_big_run.py SRC_DIR_OR_FILES... OUT_DIR [--target-mb 300] [--ranks N]
                                 [--gzip] [--gap-us 1000]

Each source file (Kineto JSON, ``.json`` or ``.json.gz``) is one rank's trace. Rank R of the
output uses source ``R % len(sources)``; its ``traceEvents`` are the source events repeated k
times, repetition r shifted in time by ``r * (longest source span + gap)`` (one period for
every rank, so ranks stay aligned), so the run looks like one
long capture of many steps:

* ``ProfilerStep#N`` (CPU and GPU annotations) is renumbered to ``N + r * n_steps`` so steps
  stay unique and consecutive;
* ``args.correlation``, ``args["External id"]``, ``args["Record function id"]``,
  ``args["Ev Idx"]``, ``args["Sequence number"]``, ``args["Comms Id"]`` and flow-event ids
  (``s``/``t``/``f``) are offset per repetition so every link stays unique; ``args.Seq``
  (collective sequence number) is offset per process group so sequences stay contiguous;
* metadata (``M``) events and the whole-capture ``Trace`` span are written once, the latter
  lengthened by the added repetitions;
* top-level keys are kept in their order (``deviceProperties``, ``baseTimeNanoseconds``, ...);
  ``distributedInfo.rank`` is set to R (the block is added if the source lacks it) and
  ``world_size`` raised to the number of ranks when smaller.

k is chosen so that each file holds about ``--target-mb`` MB (10**6 bytes) of JSON
(uncompressed, even with ``--gzip``). Output is streamed one repetition at a time, one event
per line, so memory stays near the size of one parsed source. Files are named ``rank{R}.json``
(``rank{R}.json.gz`` with ``--gzip``) and written to a temporary name, then renamed.
Nothing else is written to OUT_DIR: trace readers such as HTA parse every ``*.json`` there.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

from profkit.trace.repeat import Repeater, is_int, read_trace


def find_sources(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir()
                           if q.is_file() and (q.name.endswith(".json") or q.name.endswith(".json.gz")))
            if not found:
                sys.exit(f"make_big_run: no .json / .json.gz files in {p}")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            sys.exit(f"make_big_run: no such file or directory: {p}")
    return out


_ENC = json.JSONEncoder(ensure_ascii=False).encode  # ", " / ": " separators, like Kineto


def dump_events(events: list[dict]) -> bytes:
    """Events as JSON array items, one per line, without brackets.

    Written with Kineto's spacing (``{"ph": "X", "cat": "kernel", ...}``) rather than compact
    JSON, so byte counts and line-oriented readers (HTA finds the rank with the regex
    ``"rank":\\s+(\\d+)`` line by line) behave as on real traces.
    """
    if not events:
        return b""
    enc = _ENC
    return ",\n".join([enc(e) for e in events]).encode()


def _kv(key: str, value) -> bytes:
    return (_ENC(key) + ": " + _ENC(value)).encode()


def write_rank(src: Path, doc: dict, rank: int, world: int, out_dir: Path, target_bytes: int,
               gap_us: float, use_gzip: bool, gzip_level: int, period_us: float) -> dict:
    rep = Repeater(doc, gap_us)
    # Every rank repeats with the same period, so ranks stay aligned as in a real job.
    rep.shift = period_us if rep.float_ts else int(round(period_us))
    top = {k: v for k, v in doc.items() if k != "traceEvents"}
    dist = dict(top.get("distributedInfo") or {})
    dist["rank"] = rank
    if not is_int(dist.get("world_size")) or dist["world_size"] < world:
        dist["world_size"] = world
    keys = list(doc.keys())
    if "distributedInfo" not in top:
        keys.insert(keys.index("traceEvents"), "distributedInfo")
    top["distributedInfo"] = dist

    ti = keys.index("traceEvents")
    head = b"{\n" + b"".join(_kv(k, top[k]) + b",\n" for k in keys[:ti]) + b'"traceEvents": [\n'
    tail = b"\n]" + b"".join(b",\n" + _kv(k, top[k]) for k in keys[ti + 1:]) + b"\n}\n"

    # Size one shifted repetition to pick k up front (the Trace span needs the total length).
    fixed = len(head) + len(tail) + len(dump_events(rep.meta)) + 4 * len(rep.trace_spans) + 600
    rep_bytes = len(dump_events(rep.events(1))) + 2
    k = max(1, round((target_bytes - fixed) / rep_bytes))

    name = f"rank{rank}.json" + (".gz" if use_gzip else "")
    final = out_dir / name
    tmp = out_dir / f".{name}.tmp"
    fh = gzip.open(tmp, "wb", compresslevel=gzip_level) if use_gzip else open(tmp, "wb")
    written = 0
    n_events = 0
    first = True

    def emit(chunk: bytes, count: int):
        nonlocal written, first, n_events
        if not chunk:
            return
        if not first:
            chunk = b",\n" + chunk
        first = False
        fh.write(chunk)
        written += len(chunk)
        n_events += count

    with fh:
        fh.write(head)
        written += len(head)
        emit(dump_events(rep.meta), len(rep.meta))
        spans = rep.trace_span_events(k)
        emit(dump_events(spans), len(spans))
        for r in range(k):
            evs = rep.events(r)
            emit(dump_events(evs), len(evs))
            del evs
        fh.write(tail)
        written += len(tail)
    os.replace(tmp, final)
    return {
        "rank": rank, "source": str(src), "file": str(final), "json_bytes": written,
        "file_bytes": final.stat().st_size, "repetitions": k, "events": n_events,
        "steps": rep.n_steps * k, "span_s": (rep.t1 + rep.shift * (k - 1) - rep.t0) / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", metavar="SRC_DIR_OR_FILES",
                    help="rank trace files (.json/.json.gz) or folders of them; one per rank")
    ap.add_argument("out_dir", metavar="OUT_DIR")
    ap.add_argument("--target-mb", type=float, default=300.0,
                    help="approximate uncompressed JSON size per rank, MB (10**6 B); default 300")
    ap.add_argument("--ranks", type=int, default=None,
                    help="number of ranks to write (default: one per source); rank R uses "
                         "source R %% len(sources)")
    ap.add_argument("--gzip", action="store_true", help="write rank{R}.json.gz")
    ap.add_argument("--gzip-level", type=int, default=6)
    ap.add_argument("--gap-us", type=float, default=1000.0,
                    help="idle gap between repetitions, microseconds (default 1000)")
    args = ap.parse_args(argv)

    srcs = find_sources(args.sources)
    ranks = args.ranks or len(srcs)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stale = [p for p in out_dir.iterdir() if p.name.endswith((".json", ".json.gz"))]
    if stale:
        print(f"make_big_run: note: {out_dir} already holds {len(stale)} trace file(s); "
              "files of the same name are replaced", file=sys.stderr)
    target = int(args.target_mb * 1e6)
    cache: dict[Path, dict] = {}
    total = 0
    t_start = time.perf_counter()
    try:
        period = max(Repeater(read_trace(src), args.gap_us).shift for src in dict.fromkeys(srcs))
    except ValueError as exc:  # a source that is not a Kineto trace, or has no timed events
        sys.exit(f"make_big_run: {exc}")
    for rank in range(ranks):
        src = srcs[rank % len(srcs)]
        if src not in cache:
            cache.clear()  # keep at most one parsed source in memory
            cache[src] = read_trace(src)
        t0 = time.perf_counter()
        info = write_rank(src, cache[src], rank, ranks, out_dir, target, args.gap_us,
                          args.gzip, args.gzip_level, period)
        total += info["json_bytes"]
        print(f"rank {rank}: {info['file']}  {info['json_bytes'] / 1e6:.1f} MB JSON"
              + (f" ({info['file_bytes'] / 1e6:.1f} MB gz)" if args.gzip else "")
              + f", {info['events']:,} events, {info['repetitions']} x {src.name}, "
              f"{info['steps']} steps, span {info['span_s']:.1f} s  [{time.perf_counter() - t0:.1f} s]")
    print(f"wrote {ranks} rank(s), {total / 1e6:.1f} MB JSON in all, to {out_dir} "
          f"in {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
