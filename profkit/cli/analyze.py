"""``profkit analyze`` and ``profkit diff``: the analysis of a run (from the result cache when
nothing changed), rendered in the asked format, and the comparison of two."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from profkit.cli.options import imports, parse_ranks, parse_span, progress
from profkit.errors import IncompleteRunError, OutputError, UsageError
from profkit.textout import PIPE_WIDTH, rank_ranges, ranks_text, terminal_width

log = logging.getLogger(__name__)
NO_STEP_RANGES = ("this run has no step ranges (ProfilerStep#); --step-marker NAME makes "
                  "the ranges of a record_function recorded once per step its steps")
SLOWER_EXIT = 8  # profkit diff --fail-if-slower: the new run is surely slower than allowed

def _thresholds(args):
    """The thresholds in force: the defaults, the project's [tool.profkit], the --config
    file, then explicit options (read before any trace, so a bad file stops the command)."""
    from profkit.analyzers.config import load_thresholds
    from profkit.analyzers.thresholds import with_mfu_options
    from profkit.projectconf import working_dir

    th = load_thresholds(getattr(args, "config", None), working_dir())
    return with_mfu_options(th, getattr(args, "flops_per_step", None),
                            getattr(args, "peak_tflops", None))


def _analysis_key(args, run: str, thresholds) -> str:
    """The result-cache key of analysing ``run`` with these options (imports no pandas)."""
    import profkit
    import profkit.analyzers
    from profkit import __version__
    from profkit.analyzers.config import thresholds_key
    from profkit.classify.rules import rules_fingerprint
    from profkit.run import cache

    options = _analysis_options(args)
    code = cache.code_fingerprint(*(Path(pkg.__file__).parent  # any code change
                                    for pkg in (profkit, profkit.analyzers)))
    # --strict loads differently (a conflict between traces is an error, not a skip); the
    # path as given is in the report's first line, so another spelling is another entry
    key_text = (f"{run}|{args.ranks}|{args.cycle}|{thresholds_key(thresholds)}|{args.strict}|"
                f"{rules_fingerprint()}|{options.key()}")
    return cache.run_fingerprint(Path(run), f"analyze|{__version__}|{code}|{key_text}")


def _cached_analysis(args, run: str, thresholds, fmt: str):
    """The analysis of ``run``: from the result cache when no file of the run changed and
    it was made with the same options and thresholds, else mapped per rank on the chosen
    executor and reduced. ``fmt``: the format a cached entry must render in to be used."""
    with imports():
        from profkit.analyzers.analyze import Analysis
        from profkit.analyzers.executor import analyze_run, preload
        from profkit.run import cache
    key = None if args.no_cache else _analysis_key(args, run, thresholds)
    if key is not None and Path(run).exists():
        cached = cache.load_result(Path(run), key, Analysis)
        if cached is not None and _renders(cached, fmt):
            log.debug("analysis of %s from the result cache", run)
            return _steps_found(args, cached)
    with imports():
        preload()
    analysis = analyze_run(run, scheduler=getattr(args, "scheduler", None),
                           workers=args.workers, cache=not args.no_cache, strict=args.strict,
                           ranks=parse_ranks(args.ranks), cycle=args.cycle,
                           options=_analysis_options(args), progress=progress,
                           thresholds=thresholds)
    if key is not None:
        cache.store_result(Path(run), key, analysis)
    return _steps_found(args, analysis)


def _steps_found(args, analysis):
    """``analysis``, unless ``--steps`` matched no step of any rank: then a UsageError
    naming the steps the run has (a report of no steps would show the tables of steps it
    says it left out)."""
    info = analysis.run.get("steps") or {}
    if not getattr(args, "steps", None) or any(r.get("used") for r in info.values()):
        return analysis
    by_steps: dict[str, list[int]] = {}
    for rank, r in info.items():
        steps = r.get("used", []) + [e["step"] for e in r.get("excluded", []) if e["step"] >= 0]
        by_steps.setdefault(rank_ranges(steps), []).append(int(rank))
    has = "; ".join(f"{ranks_text(ranks)}: steps {steps}" for steps, ranks in by_steps.items()
                    if steps)
    if not has:
        raise UsageError(f"--steps {args.steps}: {NO_STEP_RANGES}")
    raise UsageError(f"--steps {args.steps}: no step of this run is in that range ({has})")


def _analysis_options(args):
    from profkit.analyzers.options import AnalysisOptions

    steps = parse_span(getattr(args, "steps", None), "--steps")
    if steps is not None:
        if any(abs(v) != float("inf") and v != int(v) for v in steps):
            raise UsageError(f"--steps {args.steps!r}: step numbers are whole numbers")
        steps = (int(max(steps[0], -1)), int(min(steps[1], 2**62)))
    return AnalysisOptions(step_marker=getattr(args, "step_marker", None), steps=steps)


def _renders(analysis, fmt: str) -> bool:
    """Whether a cached analysis renders: it decoded as data, but it lies in a folder others
    may write, so one that does not render is a cache miss, never an error."""
    try:
        _render_analysis(analysis, fmt, terminal_width(False))
        str(analysis.verdict["summary"])
    except Exception as exc:  # noqa: BLE001 - any fault of the entry is a miss
        log.debug("cached analysis of this run does not render, analysing again: %r", exc)
        return False
    return True


def _render_analysis(analysis, fmt: str, width: int = PIPE_WIDTH) -> bytes:
    """The report in ``fmt``; text is laid out for ``width`` columns."""
    import orjson

    from profkit.analyzers.report.render import to_json, to_markdown, to_text

    if fmt == "json":
        return orjson.dumps(to_json(analysis), option=orjson.OPT_INDENT_2) + b"\n"
    if fmt == "html":
        from profkit.analyzers.report.html_page import to_html

        return to_html(analysis).encode()
    if fmt == "markdown":
        return to_markdown(analysis).encode()
    return to_text(analysis, width).encode()


def cmd_analyze(args) -> int:
    from profkit.run import cache

    thresholds = _thresholds(args)
    width = terminal_width(args.output is None and sys.stdout.isatty())
    # The rendered report is cached too: the same command on an unchanged run prints it
    # without importing the analysis (pandas and numpy are most of a cached run's time).
    layout = f"-{width}" if args.format == "text" else ""
    key = None if args.no_cache or args.tables or not Path(args.run).exists() else \
        f"{_analysis_key(args, args.run, thresholds)}-{args.format}{layout}"
    report = cache.load_report(Path(args.run), key) if key else None
    analysis = None
    if report is None:
        with imports():
            from profkit.analyzers.report.render import problems

        analysis = _cached_analysis(args, args.run, thresholds, args.format)
        report = {"data": _render_analysis(analysis, args.format, width).decode(),
                  "summary": analysis.verdict["summary"], "problems": problems(analysis.run)}
        if key:
            cache.store_report(Path(args.run), key, **report)
    _emit(report["data"].encode(), args.output, report["summary"])
    if analysis is not None and args.tables:
        _write_tables(analysis, args.tables, args.tables_format)
    if args.strict and report["problems"]:
        raise IncompleteRunError(f"--strict: {'; '.join(report['problems'])} "
                                 "(the report was written)")
    return 0


def _write_tables(analysis, folder: Path, fmt: str) -> None:
    """Every table of the analysis into ``folder``, which appears whole or not at all."""
    from profkit.analyzers.report.export import is_tables_folder, table_files
    from profkit.atomic import atomic_dir

    files = table_files(analysis, fmt)
    with atomic_dir(folder, replaces=is_tables_folder) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
    print(f"wrote {folder}: {len(files) - 1} tables ({fmt}) and index.json", file=sys.stderr)


def cmd_diff(args) -> int:
    import orjson

    with imports():
        from profkit.analyzers.compare.diff import diff_analyses
        from profkit.analyzers.report.diff_text import diff_to_json, diff_to_text

    thresholds = _thresholds(args)
    base, new = (_cached_analysis(args, run, thresholds, "text") for run in (args.base, args.new))
    d = diff_analyses(base, new, thresholds, items_per_step=args.items_per_step)
    if args.format == "json":
        data = orjson.dumps(diff_to_json(d), option=orjson.OPT_INDENT_2) + b"\n"
    elif args.format == "html":
        from profkit.analyzers.report.html_page import diff_page

        data = diff_page(d).encode()
    else:
        width = terminal_width(args.output is None and sys.stdout.isatty())
        data = diff_to_text(d, markdown=args.format == "markdown", width=width).encode()
    _emit(data, args.output, d.verdict["summary"])
    return _gate(d, args.fail_if_slower)


def _gate(d, pct: float | None) -> int:
    """``--fail-if-slower PCT``: SLOWER_EXIT when the change is surely above PCT%, with a
    line on stderr either way saying why (a CI log says why the job passed or failed)."""
    from profkit.analyzers.compare.diff import gate

    if pct is None:
        return 0
    tripped, why = gate(d, pct)
    print(f"profkit: --fail-if-slower {pct:g}: {why}", file=sys.stderr)
    return SLOWER_EXIT if tripped else 0


def _emit(data: bytes, output: Path | None, summary: str) -> None:
    """Write a report to ``output`` atomically, or to stdout."""
    if output:
        from profkit.atomic import write_bytes_atomic

        write_bytes_atomic(output, data)
        print(f"wrote {output}: {summary}")
        return
    try:
        sys.stdout.write(data.decode())
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader went away: main() ends quietly
    except OSError as exc:
        raise OutputError("standard output", exc) from exc
