#!/usr/bin/env python
"""The JSON report of every sample, public and corpus run folder, before and after a change.

    python bench/report_identity.py --base SRC_DIR [--pure] [--jobs 1]

``SRC_DIR``: a copy of profkit's sources from before the change (``git archive COMMIT | tar
-x -C SRC_DIR``, its native reader built in place), imported through ``PYTHONPATH``; the
"after" side is the checkout this script lives in (or ``--after SRC_DIR``, a copy of it, so
that editing the checkout during the run changes nothing). ``--pure``: the after side with
``PROFKIT_PURE_PYTHON=1`` instead (the oracle). Each folder is analysed cold (``profkit analyze
DIR --no-cache --format json``, ``PYTHONHASHSEED=0``) by both, and the reports (or the exit
status and error of a folder refused) are compared byte for byte. Prints the folders that
differ and a count; exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = (ROOT / "samples" / "runs", ROOT / "tests" / "data" / "public",
        ROOT.parent / "shared" / "corpus")
ANALYZE = ("import sys; from profkit.cli import main; "
           "sys.exit(main(['analyze', sys.argv[1], '--no-cache', '--format', 'json']))")


def run_folders() -> list[Path]:
    """The folders that directly hold a trace file (as the identity tests collect them)."""
    found = set()
    for top in TOPS:
        for path in sorted(top.rglob("*.json*")) if top.is_dir() else ():
            if path.name.endswith((".json", ".json.gz")) and "/ranks/" not in str(path) \
                    and path.name != "run.json" and ".profkit" not in path.parts:
                found.add(path.parent)
    return sorted(found)


def report(folder: Path, env: dict) -> tuple[int, bytes]:
    proc = subprocess.run([sys.executable, "-c", ANALYZE, str(folder)], capture_output=True,
                          env=env, cwd="/")
    return proc.returncode, proc.stdout if proc.returncode in (0, 1) else proc.stderr[-2000:]


def _importable(src: Path, site: Path) -> str:
    """A folder to put on PYTHONPATH that imports ``src``'s profkit whole: its profkit/ and
    the packages the install maps into it (analyzers, collectors, dashboard), as
    samples/capture_lib.sh maps a checkout. Without it, ``profkit.analyzers`` of a bare
    ``src`` came from this checkout's editable install: base and after ran one analyzer."""
    (site / "profkit").mkdir(parents=True)
    for f in (src / "profkit").iterdir():
        (site / "profkit" / f.name).symlink_to(f.resolve())
    for d in ("analyzers", "collectors", "dashboard"):
        (site / "profkit" / d).symlink_to((src / d).resolve())
    return str(site)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="profkit sources before the change")
    ap.add_argument("--after", type=Path, default=ROOT,
                    help="profkit sources after the change (default: this checkout)")
    ap.add_argument("--pure", action="store_true", help="after: the pure-Python reader")
    args = ap.parse_args(argv)
    common = {**os.environ, "PYTHONHASHSEED": "0"}
    common.pop("PROFKIT_PURE_PYTHON", None)
    shims = tempfile.TemporaryDirectory(prefix="report_identity_")
    before = {**common, "PYTHONPATH": _importable(args.base, Path(shims.name) / "base")}
    after = {**common, "PYTHONPATH": _importable(args.after, Path(shims.name) / "after")}
    if args.pure:
        after["PROFKIT_PURE_PYTHON"] = "1"
    differ, refused = [], 0
    folders = run_folders()
    for folder in folders:
        a, b = report(folder, before), report(folder, after)
        refused += a[0] not in (0, 1)
        if a != b:
            differ.append(folder)
            print(f"DIFFERS: {folder} (exit {a[0]} -> {b[0]})", flush=True)
    print(f"{len(folders)} run folders: {len(folders) - len(differ)} identical "
          f"({refused} refused alike or not), {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
