"""Options that several commands share, and parsing their values."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

from profkit.errors import UsageError

_PROGRAM: list[bool] = []  # set by main() when it runs as the profkit program

STRICT_HELP = "fail on duplicate ranks or traces from another run instead of skipping them"


ANALYZE_STRICT_HELP = (
    STRICT_HELP + "; and after writing the report, exit with code 7 when it is not about the "
    "whole run: the run failed, is incomplete or still running (run.json, ranks/), ranks are "
    "missing (fewer analysed than the world size, ranks left out with --ranks aside), a file "
    "that could be a trace (.json, .json.gz) was skipped (not profkit's own merged output or "
    "a second name of a file already read), or rank numbers were guessed from file order. "
    "Other notes (cycles joined, steps left out) do not count")


def parse_ranks(text: str | None) -> list[int] | None:
    """'0,2,4-7' -> [0, 2, 4, 5, 6, 7]."""
    if not text:
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--ranks {text!r}: expected a list such as 0,2,4-7") from None
    return out


def parse_span(text: str | None, option: str) -> tuple[float, float] | None:
    """'A:B' -> (A, B); either side may be empty."""
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    try:
        return (float(lo) if lo else float("-inf"), float(hi) if hi else float("inf"))
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected START:END") from None


def cycle_number(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a cycle number 0, 1, 2, ...")
    return int(text)


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def number_pair(text: str) -> tuple[float, float]:
    """``8,32`` -> (8.0, 32.0): two positive numbers, base then new."""
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected BASE,NEW (two numbers), got {text!r}")
    return positive_number(parts[0].strip()), positive_number(parts[1].strip())


def percent(text: str) -> float:
    """A percentage, ``5`` or ``5%`` (0 and up)."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a percentage (0 or more), got {text!r}")
    return value


def progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and total > 1:
        bar = "#" * int(30 * done / total)
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rreading traces [{bar:<30}] {done}/{total}{end}")


def load(args):
    from profkit.run.loader import load_run

    return load_run(args.run, cache=not args.no_cache, strict=args.strict, workers=args.workers,
                    ranks=parse_ranks(getattr(args, "ranks", None)), cycle=args.cycle,
                    progress=progress)


def add_load_options(p: argparse.ArgumentParser, strict_help: str = STRICT_HELP) -> None:
    p.add_argument("run", help="a profkit run directory, a folder of torch.profiler traces, or one trace file")
    add_read_options(p, strict_help)


def add_read_options(p: argparse.ArgumentParser, strict_help: str = STRICT_HELP) -> None:
    p.add_argument("--no-cache", action="store_true", help="ignore and do not write the ingest cache")
    p.add_argument("--strict", action="store_true", help=strict_help)
    p.add_argument("--ranks", help="only these ranks, e.g. 0,2,4-7")
    p.add_argument("--cycle", type=cycle_number, metavar="K",
                   help="only profiler cycle K of each rank (0 is the first; by default every "
                   "cycle is read, as steps of its rank), or on-demand capture K of a folder "
                   "of captures")
    p.add_argument("--workers", type=int, help="traces parsed at once (default: the CPU count, "
                   "fewer when free memory is short)")
    add_classify_option(p)


def add_analysis_options(p: argparse.ArgumentParser) -> None:
    """What an analysis reads beside the traces: steps, thresholds, executor."""
    p.add_argument("--step-marker", metavar="NAME",
                   help="use the host ranges named NAME (a record_function such as train_step "
                   "or decode; a regex if no range has exactly that name) as the steps, for "
                   "traces without ProfilerStep# ranges")
    p.add_argument("--steps", metavar="A:B",
                   help="use exactly steps A..B (inclusive) for the verdict, instead of leaving "
                   "out the first/last recorded and one-off steps automatically")
    p.add_argument("--config", type=Path, metavar="FILE",
                   help="thresholds to use (TOML: name = value for any field of "
                   "profkit.analyzers.thresholds.Thresholds); beats [tool.profkit] of the "
                   "project's pyproject.toml, explicit options beat it")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the per-rank analysis on a Dask cluster: its scheduler address "
                   "(tcp://host:8786), or 'local' for a LocalCluster of --workers processes; "
                   "needs pip install 'profkit[cluster]' and the run on storage every worker "
                   "reads (default: a local process pool)")


def add_classify_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--classify", type=Path, metavar="FILE",
                   help="kernel classification rules (TOML: [[rule]] pattern = REGEX, class = "
                   "compute|communication|memcpy|memset, subclass = ...), tried before the "
                   "built-in ones and [tool.profkit.classify] of the project's pyproject.toml")


def add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("text", "json", "markdown", "html"), default="text",
                   help="text (a terminal), json (the full contract), markdown (a pull request) "
                   "or html (one self-contained page, no external URL)")
    p.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")


def as_program() -> None:
    """Say that this process is the ``profkit`` program (a process of its own, ended by
    the command), not a library caller's (tests, notebooks): see :func:`imports`."""
    _PROGRAM[:] = [True]


@contextlib.contextmanager
def imports() -> Iterator[None]:
    """A command's heavy imports (pandas, numpy, the analysis): in the program, without the
    cyclic garbage collector, whose ~160 collections over the new modules' objects took ~35
    ms of a cold analyze's 0.27 s of imports; then those objects, which live as long as the
    program, are frozen (gc.freeze), so that no later full collection walks them again, in
    this process or in the pool's forked workers (whose pages it would copy). For a library
    caller, a plain block: the caller's collector is left as it is."""
    if not _PROGRAM or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
