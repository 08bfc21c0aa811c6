#!/usr/bin/env python
"""Trace-ingest benchmark: profkit vs the orjson floor vs Holistic Trace Analysis (HTA).

    python bench/ingest_bench.py RUN_DIR [--hta-venv PATH] [--skip-hta] [--repeat 3]
                                 [--markdown] [--json-out FILE]

RUN_DIR is a folder of rank traces (``bench/make_big_run.py`` writes one). Every measurement
runs in a fresh child process; the parent times it and follows its memory:

* ``wall s``   time of the measured operation inside the child (after imports), median of
               the repeats; ``best s`` the fastest repeat. ``proc s`` is the child's whole life
               (interpreter start, imports, operation, exit) as the parent saw it; for the
               ``merge`` CLI, a whole command, wall is that.
* ``peak MiB`` peak memory of the child and all its descendants together: the sum of their
               RSS (``/proc/PID/statm``), sampled every ``--sample-ms``, or the child's own
               ``ru_maxrss`` from ``os.wait4`` when that is larger; max over the repeats. Pages
               that forked workers share with their parent are counted in each, so for
               multi-process loaders (profkit, HTA) this is a slight over-estimate.
* ``1-proc MiB`` the largest ``ru_maxrss`` of any single process of the tree (exact; from the
               child's ``wait4`` rusage, which covers its waited-for descendants).
* ``bg cores`` CPU used by *other* processes on the machine during the measurement (cores,
               from /proc/stat minus the child's rusage); above ~0.2 the timing is disturbed.
               Before each measurement the script waits (``--quiet-wait``) for the machine to
               settle.

Rows: floor (read + ``orjson.loads`` each rank file in one process, with and without
``gc.disable()``; the faster is the floor), profkit cold (``load_run(cache=False)``), profkit
cached (``load_run()`` with the cache already built), merge (``python -m profkit merge``, to
``.json.gz`` and ``.json``), HTA (``TraceAnalysis(trace_dir=...)`` in its own venv).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402  (the shared measuring code)
    CHILD_PRELUDE,
    DEFAULT_HTA_VENV,
    FLOOR_PARSE,
    MIB,
    QUIET,
    Row,
    count_events,
    ensure_hta_venv,
    err_text,
    hta_dir_for,
    json_bytes,
    kill_current,
    machine_info,
    measure,
    profkit_python_ok,
    rank_files,
    run_child,
)

# Targets from the issue.
T_COLD_VS_HTA = 5.0  # cold ingest at least 5x faster than HTA
T_COLD_VS_FLOOR = 1.5  # cold ingest within 1.5x of the orjson floor
T_CACHED_VS_HTA = 30.0  # cached re-open at least 30x faster than HTA
T_MEM_VS_JSON = 2.0  # peak memory under 2x the run's JSON bytes


# --------------------------------------------------------------------------------------------
# child programs (run with -c; argv[1] is a JSON blob)

FLOOR_CHILD = CHILD_PRELUDE + r"""
import gc, gzip, orjson
if ARGS["gc_off"]:
    gc.disable()
t0 = time.perf_counter()
n = 0
t_read = 0.0
t_gunzip = 0.0
for path in ARGS["files"]:
    a = time.perf_counter()
    with open(path, "rb") as fh:
        raw = fh.read()
    b = time.perf_counter()
    if path.endswith(".gz"):
        raw = gzip.decompress(raw)
    c = time.perf_counter()
    doc = orjson.loads(raw)
    n += len(doc["traceEvents"])
    t_read += b - a
    t_gunzip += c - b
    del doc, raw
t1 = time.perf_counter()
gc.enable()
report(wall=t1 - t0, events=n, read_s=t_read, gunzip_s=t_gunzip)
"""

FLOOR_PAR_CHILD = CHILD_PRELUDE + FLOOR_PARSE + r"""
if __name__ == "__main__":
    t0 = time.perf_counter()
    with ProcessPoolExecutor(min(len(ARGS["files"]), os.cpu_count() or 1)) as pool:
        n = sum(pool.map(parse, ARGS["files"]))
    t1 = time.perf_counter()
    report(wall=t1 - t0, events=n)
"""

PROFKIT_LOAD_CHILD = CHILD_PRELUDE + r"""
import profkit
t0 = time.perf_counter()
run = profkit.load_run(ARGS["run_dir"], cache=ARGS["cache"])
events = {str(r): int(len(rd.events)) for r, rd in run.ranks.items()}
t1 = time.perf_counter()
report(wall=t1 - t0, events=sum(events.values()), per_rank=events)
"""

PROFKIT_PROFILE_CHILD = CHILD_PRELUDE + r"""
import cProfile, pstats, io, profkit
pr = cProfile.Profile()
t0 = time.perf_counter()
pr.enable()
try:  # one process, so the profile sees the parsing (workers would hide it)
    run = profkit.load_run(ARGS["run_dir"], cache=ARGS["cache"], workers=1)
except TypeError:
    run = profkit.load_run(ARGS["run_dir"], cache=ARGS["cache"])
events = {str(r): int(len(rd.events)) for r, rd in run.ranks.items()}
pr.disable()
t1 = time.perf_counter()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(35)
s2 = io.StringIO()
pstats.Stats(pr, stream=s2).sort_stats("tottime").print_stats(25)
sys.stderr.write(s.getvalue() + "\n" + s2.getvalue())
report(wall=t1 - t0, events=sum(events.values()))
"""

HTA_CHILD = CHILD_PRELUDE + r"""
import logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
ta = TraceAnalysis(trace_dir=ARGS["trace_dir"])
events = {str(r): int(len(df)) for r, df in ta.t.traces.items()}
t1 = time.perf_counter()
report(wall=t1 - t0, events=sum(events.values()), per_rank=events)
"""


def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def build_table(rows: list[Row], floor: Row | None, hta: Row | None) -> tuple[list[str], list[list[str]]]:
    head = ["measurement", "wall s", "best s", "proc s", "peak MiB", "1-proc MiB", "x floor",
            "HTA / this", "bg cores"]
    body = []
    fw = floor.wall if floor and floor.ok else None
    hw = hta.wall if hta and hta.ok else None
    for r in rows:
        if not r.ok:
            body.append([r.label, f"error: {r.error}" if r.error else "skipped"] + [""] * (len(head) - 2))
            continue
        body.append([
            r.label, _f(r.wall), _f(r.best), _f(r.proc), _f(r.peak, "{:,.0f}"),
            _f(r.one_proc, "{:,.0f}"),
            _f(r.wall / fw if fw else None, "{:.2f}x"),
            _f(hw / r.wall if hw else None, "{:.1f}x"),
            _f(r.bg, "{:.2f}"),
        ])
    return head, body


def render_text(head, body) -> str:
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) for i in range(len(head))]
    fmt = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    for b in body:
        if b[1].startswith("error") or b[1] == "skipped":
            lines.append(f"{b[0].ljust(widths[0])}  {b[1]}")
        else:
            lines.append(fmt(b))
    return "\n".join(lines)


def render_md(head, body) -> str:
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|"]
    for b in body:
        cells = [c.replace("|", "\\|") for c in b]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def evaluate_targets(floor: Row, cold: Row, cached: Row, hta: Row, total_json: int) -> list[tuple[str, str, str]]:
    out = []

    def check(name, value_text, ok):
        out.append((name, value_text, "n/a" if ok is None else ("PASS" if ok else "FAIL")))

    hw = hta.wall if hta.ok else None
    if cold.ok and hw:
        s = hw / cold.wall
        check(f"cold ingest >= {T_COLD_VS_HTA:g}x faster than HTA", f"{s:.1f}x", s >= T_COLD_VS_HTA)
    else:
        check(f"cold ingest >= {T_COLD_VS_HTA:g}x faster than HTA", "no data", None)
    if cold.ok and floor.ok:
        r = cold.wall / floor.wall
        check(f"cold ingest <= {T_COLD_VS_FLOOR:g}x the orjson floor", f"{r:.2f}x", r <= T_COLD_VS_FLOOR)
    else:
        check(f"cold ingest <= {T_COLD_VS_FLOOR:g}x the orjson floor", "no data", None)
    if cached.ok and hw:
        s = hw / cached.wall
        check(f"cached re-open >= {T_CACHED_VS_HTA:g}x faster than HTA", f"{s:.1f}x", s >= T_CACHED_VS_HTA)
    else:
        check(f"cached re-open >= {T_CACHED_VS_HTA:g}x faster than HTA", "no data", None)
    for row in (cold, cached):
        if row.ok and hta.ok:
            check(f"{row.label} peak memory < HTA's",
                  f"{row.peak:,.0f} vs {hta.peak:,.0f} MiB", row.peak < hta.peak)
        else:
            check(f"{row.label} peak memory < HTA's", "no data", None)
        if row.ok:
            lim = T_MEM_VS_JSON * total_json / MIB
            check(f"{row.label} peak memory < {T_MEM_VS_JSON:g}x JSON bytes",
                  f"{row.peak:,.0f} vs {lim:,.0f} MiB ({row.peak * MIB / total_json:.2f}x)",
                  row.peak < lim)
        else:
            check(f"{row.label} peak memory < {T_MEM_VS_JSON:g}x JSON bytes", "no data", None)
    return out


# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("run_dir", metavar="RUN_DIR")
    ap.add_argument("--hta-venv", default=str(DEFAULT_HTA_VENV),
                    help=f"venv with holistictraceanalysis and pandas<3 (default {DEFAULT_HTA_VENV}; "
                         "created on demand)")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--skip-profkit", action="store_true")
    ap.add_argument("--skip-merge", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-repeat", type=int, default=None,
                    help="repeats for HTA (default: --repeat); it is slow")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with profkit installed (default: this one)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per measurement, seconds")
    ap.add_argument("--sample-ms", type=float, default=50.0, help="memory sampling interval")
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each measurement wait up to this many seconds for other "
                         "processes to use < --quiet-cores cores (0: don't wait)")
    ap.add_argument("--quiet-cores", type=float, default=0.25)
    ap.add_argument("--work-dir", default=None,
                    help="scratch folder for merge output and HTA's trace folder "
                         "(default: a temp folder, removed afterwards)")
    ap.add_argument("--profile", action="store_true",
                    help="also run profkit cold/cached once in one process (workers=1) under "
                         "cProfile; print the top functions to stderr")
    ap.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    ap.add_argument("--json-out", default=None, help="write all numbers as JSON here")
    args = ap.parse_args(argv)

    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    QUIET["wait"], QUIET["threshold"] = args.quiet_wait, args.quiet_cores
    signal.signal(signal.SIGTERM, kill_current)
    signal.signal(signal.SIGINT, kill_current)
    run_dir = Path(args.run_dir).resolve()
    files = rank_files(run_dir)
    if not files:
        sys.exit(f"ingest_bench: no rank traces (*.json, *.json.gz) in {run_dir}")
    py = args.python
    sample_s = args.sample_ms / 1000
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="profkit-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    sizes = [json_bytes(f) for f in files]
    total_json = sum(sizes)
    gz = any(f.name.endswith(".gz") for f in files)
    log(f"run: {run_dir}: {len(files)} rank file(s), {total_json / 1e6:,.1f} MB JSON"
        + (" (gzip; decompressed size)" if gz else ""))
    # warm the page cache so every measurement reads from memory
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    counts = count_events(files, py, args.timeout)
    info = machine_info()
    rows: dict[str, Row] = {}

    # ---- floor
    log("floor: read + orjson.loads of each rank file, sequentially, one process"
        + (" (gunzip included)" if gz else ""))
    fl_args = {"files": [str(f) for f in files]}
    for gc_off, key, label in ((False, "floor_gc", "orjson.loads (gc on)"),
                               (True, "floor_nogc", "orjson.loads (gc off)")):
        rows[key] = measure(Row(key, label), [py, "-c", FLOOR_CHILD,
                                              json.dumps({**fl_args, "gc_off": gc_off})],
                            args.repeat, args.timeout, sample_s, log=log)
    if len(files) > 1:
        # informational: the same parse, one process per rank (what a parallel loader can reach)
        rows["floor_par"] = measure(Row("floor_par", "orjson.loads (gc off), 1 proc/rank"),
                                    [py, "-c", FLOOR_PAR_CHILD, json.dumps(fl_args)],
                                    args.repeat, args.timeout, sample_s, log=log)
    cands = [r for r in (rows["floor_gc"], rows["floor_nogc"]) if r.ok]
    floor = min(cands, key=lambda r: r.wall) if cands else rows["floor_gc"]
    floor.label += "  = floor"

    # ---- profkit
    pk_err = None if args.skip_profkit else profkit_python_ok(py)
    cold, cached = Row("cold", "profkit cold"), Row("cached", "profkit cached")
    merge_gz, merge_js = Row("merge_gz", "profkit merge -> .json.gz"), Row("merge_json", "profkit merge -> .json")
    if args.skip_profkit:
        for r in (cold, cached, merge_gz, merge_js):
            r.error = None
    elif pk_err:
        log(f"profkit not usable with {py}: {pk_err}")
        for r in (cold, cached, merge_gz, merge_js):
            r.error = f"profkit not loadable: {pk_err}"
    else:
        log("profkit cold: load_run(RUN_DIR, cache=False)")
        measure(cold, [py, "-c", PROFKIT_LOAD_CHILD,
                       json.dumps({"run_dir": str(run_dir), "cache": False})],
                args.repeat, args.timeout, sample_s, log=log)
        log("profkit cached: building the cache once (untimed), then load_run(RUN_DIR)")
        warm = run_child([py, "-c", PROFKIT_LOAD_CHILD,
                          json.dumps({"run_dir": str(run_dir), "cache": True})],
                         args.timeout, sample_s)
        if warm.rc != 0 or warm.result is None:
            cached.error = "building cache failed: " + err_text(warm)
            log(f"  {cached.error}")
        else:
            cached.extra["build_cache_s"] = warm.result["wall"]
            cached.extra["build_cache_peak_mib"] = warm.peak_mib
            log(f"  cache built in {warm.result['wall']:.2f} s (peak {warm.peak_mib:,.0f} MiB)")
            measure(cached, [py, "-c", PROFKIT_LOAD_CHILD,
                             json.dumps({"run_dir": str(run_dir), "cache": True})],
                    args.repeat, args.timeout, sample_s, log=log)
        if not args.skip_merge:
            has_main = subprocess.run(
                [py, "-c", "import importlib.util as u, sys; "
                           "sys.exit(u.find_spec('profkit.__main__') is None)"],
                capture_output=True).returncode == 0
            entry = ([py, "-m", "profkit"] if has_main
                     else [py, "-c", "import sys; from profkit.cli import main; sys.exit(main())"])
            for row, name in ((merge_gz, "merged.json.gz"), (merge_js, "merged.json")):
                out = work / name
                log(f"{row.label}: {' '.join(entry[1:])} merge RUN_DIR -o {out}")
                measure(row, entry + ["merge", str(run_dir), "-o", str(out)], args.repeat,
                        args.timeout, sample_s, wall_from_child=False, log=log)
                if out.exists():
                    row.extra["out_bytes"] = out.stat().st_size
                    row.note = f"output {out.stat().st_size / 1e6:,.1f} MB"
        if args.profile:
            for cache in (False, True):
                log(f"cProfile of load_run(cache={cache}, workers=1) (one process):")
                m = run_child([py, "-c", PROFKIT_PROFILE_CHILD,
                               json.dumps({"run_dir": str(run_dir), "cache": cache})],
                              args.timeout, sample_s)
                log(m.stderr[-12000:])

    # ---- HTA
    hta = Row("hta", "HTA TraceAnalysis(trace_dir)")
    hta_version = None
    if args.skip_hta:
        hta.error = None
    else:
        hpy, hta_version = ensure_hta_venv(Path(args.hta_venv), log=log)
        if hpy is None:
            hta.error = hta_version
            hta_version = None
        else:
            tdir = hta_dir_for(files, work)
            log(f"HTA {hta_version} (HTA, pandas): TraceAnalysis(trace_dir={tdir})")
            measure(hta, [str(hpy), "-c", HTA_CHILD, json.dumps({"trace_dir": str(tdir)})],
                    args.hta_repeat or args.repeat, args.timeout, sample_s, log=log)

    ordered = [rows["floor_gc"], rows["floor_nogc"]] + ([rows["floor_par"]] if "floor_par" in rows else []) + [cold, cached, merge_gz, merge_js, hta]
    shown = [r for r in ordered if r.ok or r.error]
    head, body = build_table(shown, floor, hta)
    targets = evaluate_targets(floor, cold, cached, hta, total_json)

    try:
        import profkit  # noqa: F401
        pk_version = getattr(profkit, "__version__", "?")
    except Exception:
        pk_version = None
    header = [
        f"run: {run_dir}",
        f"ranks: {len(files)}; JSON bytes: {total_json:,} ({total_json / 1e6:,.1f} MB"
        + (", decompressed from .gz" if gz else "") + "); per rank: "
        + ", ".join(f"{f.name} {s / 1e6:,.1f} MB" for f, s in zip(files, sizes)),
        "events per rank: " + (", ".join(f"{c:,}" for c in counts) if counts else "?"),
        f"machine: {info['cpus']} CPUs ({info['cpu_model']}), {info['mem_gib']:.0f} GiB RAM, "
        f"{info['os']}, Python {info['python']}; {info['date']}",
        f"profkit {pk_version}; HTA {hta_version or '-'}; repeats {args.repeat}"
        + (f" (HTA {args.hta_repeat})" if args.hta_repeat else "")
        + "; wall = median, best = min, peak = max over repeats; "
        "bg cores = max CPU load of other processes during a repeat",
    ]
    outs = [f"{r.label.split('-> ')[-1]} {r.extra['out_bytes'] / 1e6:,.1f} MB"
            for r in (merge_gz, merge_js) if r.ok and r.extra.get("out_bytes")]
    if outs:
        header.append("merge output: " + ", ".join(outs))
    if floor.ok and floor.extra.get("gunzip_s"):
        header.append(f"floor includes gunzip: {floor.extra['gunzip_s']:.2f} s of {floor.wall:.2f} s")
    print("\n".join(header))
    print()
    print(render_text(head, body))
    print()
    print("targets:")
    w = max(len(t[0]) for t in targets)
    for name, val, res in targets:
        print(f"  {res:4}  {name.ljust(w)}  {val}")
    if args.markdown:
        print()
        print("\n".join(f"- {h}" for h in header))
        print()
        print(render_md(head, body))
        print()
        print("| target | measured | result |\n|---|---:|:---:|")
        for name, val, res in targets:
            print(f"| {name} | {val} | {res} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({
            "run_dir": str(run_dir), "files": [str(f) for f in files], "json_bytes": sizes,
            "events_per_rank": counts, "machine": info, "profkit": pk_version,
            "hta": hta_version, "rows": {r.key: r.to_dict() for r in ordered},
            "targets": [{"target": n, "measured": v, "result": r} for n, v, r in targets],
        }, indent=2))
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
