"""The gold check: every report of the gold set written by one checkout, then compared with
another's, file by file.

The gold set is every bundled sample run (``samples/runs``), every ``tests/data/public``
trace and every corpus trace (``../shared/corpus``, one run per file). For each run it writes
``profkit analyze --format json``, the text report (100 columns), every table of
``--tables`` (CSV) and the exit code. A refactor that must not change a result keeps all of
them byte-identical.

    python bench/gold.py write OUT [--python PY] [--jobs N]   # this (or PY's) checkout
    python bench/gold.py compare BASE NEW                      # exit 1 when anything differs
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"
TRACE_SUFFIXES = (".json", ".json.gz")


def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != "run.json"


def sample_runs(root: Path) -> list[Path]:
    """Folders under ``root`` that are runs: a run.json, a traces/ folder or trace files of
    their own (a run's sub-folders are not runs)."""
    runs = []
    for d in sorted(p for p in root.rglob("*") if p.is_dir()):
        if any(d.is_relative_to(r) for r in runs):
            continue
        if (d / "run.json").is_file() or (d / "traces").is_dir() or any(
                _is_trace(f) for f in d.iterdir()):
            runs.append(d)
    return runs


def gold_set() -> dict[str, Path]:
    """{name: path} of every run of the gold set."""
    runs = {f"samples/{p.relative_to(ROOT / 'samples/runs')}": p
            for p in sample_runs(ROOT / "samples" / "runs")}
    public = ROOT / "tests" / "data" / "public"
    runs.update({f"public/{p.name}": p for p in sorted(public.iterdir()) if p.is_dir()})
    if CORPUS.is_dir():
        runs.update({f"corpus/{p.relative_to(CORPUS)}": p
                     for p in sorted(CORPUS.rglob("*.json.gz"))})
    return runs


def write_one(python: str, name: str, path: Path, out: Path) -> str:
    dest = out / name.replace("/", "__")
    dest.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, COLUMNS="100")
    # relative to the checkout: reports name the run, and two checkouts must name it alike
    base = [python, "-m", "profkit", "analyze", os.path.relpath(path, ROOT), "--no-cache",
            "--workers", "1"]
    rcs = []
    for fmt, extra in (("json", ["--tables", str(dest / "tables")]), ("text", [])):
        done = subprocess.run(base + ["--format", fmt] + extra, capture_output=True, env=env,
                              cwd=ROOT)
        (dest / f"report.{fmt}").write_bytes(done.stdout)
        (dest / f"stderr.{fmt}").write_bytes(done.stderr)
        rcs.append(done.returncode)
    (dest / "rc").write_text(" ".join(map(str, rcs)))
    return f"{name}: rc {rcs}"


def write(out: Path, python: str, jobs: int) -> None:
    runs = gold_set()
    with ThreadPoolExecutor(jobs) as pool:
        for line in pool.map(lambda kv: write_one(python, kv[0], kv[1], out), runs.items()):
            print(line, flush=True)
    print(f"{len(runs)} runs written to {out}")


def compare(base: Path, new: Path) -> int:
    differ = []
    names = sorted({p.name for p in base.iterdir()} | {p.name for p in new.iterdir()})
    for name in names:
        a, b = base / name, new / name
        files = {f.relative_to(a) for f in a.rglob("*") if f.is_file()} | {
            f.relative_to(b) for f in b.rglob("*") if f.is_file()}
        for f in sorted(files):
            if f.name.startswith("stderr"):
                continue  # timings and paths may differ; the reports may not
            if not ((a / f).is_file() and (b / f).is_file()
                    and filecmp.cmp(a / f, b / f, shallow=False)):
                differ.append(f"{name}/{f}")
    print("\n".join(differ))
    print(f"{len(names)} runs, {len(differ)} files differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out", type=Path)
    w.add_argument("--python", default=sys.executable)
    w.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    c = sub.add_parser("compare")
    c.add_argument("base", type=Path)
    c.add_argument("new", type=Path)
    args = ap.parse_args()
    if args.cmd == "write":
        write(args.out, args.python, args.jobs)
        return 0
    return compare(args.base, args.new)


if __name__ == "__main__":
    sys.exit(main())
