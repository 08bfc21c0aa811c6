"""The ``profkit`` command. Parses arguments, calls one library function, renders its
result; the only place that sets up logging and maps errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from profkit import __version__
from profkit.errors import IncompleteRunError, OutputError, ProfkitError, UsageError

log = logging.getLogger("profkit")


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


def _cycle(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected a cycle number 0, 1, 2, ...")
    return int(text)


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty() and total > 1:
        bar = "#" * int(30 * done / total)
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rreading traces [{bar:<30}] {done}/{total}{end}")


def _load(args):
    from profkit.loader import load_run

    return load_run(args.run, cache=not args.no_cache, strict=args.strict, workers=args.workers,
                    ranks=parse_ranks(getattr(args, "ranks", None)), cycle=args.cycle,
                    progress=_progress)


def cmd_merge(args) -> int:
    from profkit.merge import merge_run
    from profkit.summary import format_summary
    from profkit.window import window_for

    run = _load(args)
    output = args.output or Path(f"{Path(args.run).resolve().name}.merged.json.gz")
    window = window_for(run, parse_span(args.steps, "--steps"), parse_span(args.window, "--window"))
    report = merge_run(run, output, window=window)
    for skipped in report.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    print(f"wrote {report.output}: {report.events_written} events from rank(s) "
          f"{', '.join(map(str, report.ranks))} (open it at https://ui.perfetto.dev)")
    if not args.quiet:
        print(format_summary(run))
    return 0


def cmd_summary(args) -> int:
    from profkit.summary import format_summary

    print(format_summary(_load(args)))
    return 0


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
    from profkit import __version__, cache
    from profkit.analyzers.config import thresholds_key
    from profkit.classify_rules import rules_fingerprint

    options = _analysis_options(args)
    code = "|".join(cache.run_fingerprint(Path(pkg.__file__).parent)  # any code change
                    for pkg in (profkit, profkit.analyzers))
    # --strict loads differently (a conflict between traces is an error, not a skip)
    key_text = (f"{args.ranks}|{args.cycle}|{thresholds_key(thresholds)}|{args.strict}|"
                f"{rules_fingerprint()}|{options.key()}")
    return cache.run_fingerprint(Path(run), f"analyze|{__version__}|{code}|{key_text}")


def _cached_analysis(args, run: str, thresholds, fmt: str):
    """The analysis of ``run``: from the result cache when no file of the run changed and
    it was made with the same options and thresholds, else mapped per rank on the chosen
    executor and reduced. ``fmt``: the format a cached entry must render in to be used."""
    from profkit import cache
    from profkit.analyzers.analyze import Analysis
    from profkit.analyzers.executor import analyze_run

    key = _analysis_key(args, run, thresholds)
    if not args.no_cache and Path(run).exists():
        cached = cache.load_result(Path(run), key, Analysis)
        if cached is not None and _renders(cached, fmt):
            log.debug("analysis of %s from the result cache", run)
            return cached
    analysis = analyze_run(run, scheduler=getattr(args, "scheduler", None),
                           workers=args.workers, cache=not args.no_cache, strict=args.strict,
                           ranks=parse_ranks(args.ranks), cycle=args.cycle,
                           options=_analysis_options(args), progress=_progress,
                           thresholds=thresholds)
    if not args.no_cache:
        cache.store_result(Path(run), key, analysis)
    return analysis


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
        _render_analysis(analysis, fmt)
        str(analysis.verdict["summary"])
    except Exception as exc:  # noqa: BLE001 - any fault of the entry is a miss
        log.debug("cached analysis of this run does not render, analysing again: %r", exc)
        return False
    return True


def _render_analysis(analysis, fmt: str) -> bytes:
    import orjson

    from profkit.analyzers.render import to_json, to_markdown, to_text

    if fmt == "json":
        return orjson.dumps(to_json(analysis), option=orjson.OPT_INDENT_2) + b"\n"
    if fmt == "html":
        from profkit.analyzers.html_page import to_html

        return to_html(analysis).encode()
    return (to_markdown if fmt == "markdown" else to_text)(analysis).encode()


def cmd_analyze(args) -> int:
    from profkit import cache

    thresholds = _thresholds(args)
    # The rendered report is cached too: the same command on an unchanged run prints it
    # without importing the analysis (pandas and numpy are most of a cached run's time).
    key = None if args.no_cache or args.tables or not Path(args.run).exists() else \
        f"{_analysis_key(args, args.run, thresholds)}-{args.format}"
    report = cache.load_report(Path(args.run), key) if key else None
    analysis = None
    if report is None:
        from profkit.analyzers.render import problems

        analysis = _cached_analysis(args, args.run, thresholds, args.format)
        report = {"data": _render_analysis(analysis, args.format).decode(),
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
    from profkit.analyzers.export import is_tables_folder, table_files
    from profkit.atomic import atomic_dir

    files = table_files(analysis, fmt)
    with atomic_dir(folder, replaces=is_tables_folder) as tmp:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
    print(f"wrote {folder}: {len(files) - 1} tables ({fmt}) and index.json", file=sys.stderr)


def cmd_diff(args) -> int:
    import orjson

    from profkit.analyzers.diff import diff_analyses, diff_to_json, diff_to_text

    thresholds = _thresholds(args)
    base, new = (_cached_analysis(args, run, thresholds, "text") for run in (args.base, args.new))
    d = diff_analyses(base, new, thresholds)
    if args.format == "json":
        data = orjson.dumps(diff_to_json(d), option=orjson.OPT_INDENT_2) + b"\n"
    elif args.format == "html":
        from profkit.analyzers.html_page import diff_page

        data = diff_page(d).encode()
    else:
        data = diff_to_text(d, markdown=args.format == "markdown").encode()
    _emit(data, args.output, d.verdict["summary"])
    return 0


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


def cmd_launch(args) -> int:
    from profkit.collectors.launch import launch

    return launch(args.run_dir, args.command)


LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_ENV = "PROFKIT_DASHBOARD_TOKEN"
NEW_TOKEN = "new"  # --token without a value: make one up


def cmd_dashboard(args) -> int:
    from profkit.dashboard.app import create_app, default_roots, warm_up
    from profkit.dashboard.hosts import allowed_names
    from profkit.dashboard.serving import new_token, serve

    paths = [Path(p) for p in args.runs] + list(args.root or [])
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    token = os.environ.get(TOKEN_ENV) if args.token is None else args.token
    token = new_token() if token == NEW_TOKEN else token
    if token is not None and len(token) < 16:
        raise UsageError(f"--token / {TOKEN_ENV}: at least 16 characters, or --token alone "
                         "for a random one")
    try:
        allowed = allowed_names(args.allowed_host or ())
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    roots = list(args.root or []) or ([] if args.runs else default_roots())
    app = create_app([Path(p) for p in args.runs], roots)
    if args.host not in LOOPBACK and token is None:
        log.warning("serving on %s with no authentication: anyone who can reach port %d can "
                    "read these runs. Add --token, or serve on 127.0.0.1 behind an SSH tunnel",
                    args.host, args.port)
    host = f"[{args.host}]" if ":" in args.host else args.host
    query = f"?token={token}" if token else ""
    print(f"profkit dashboard: http://{host}:{args.port}/{query} (Ctrl-C to stop)", flush=True)
    warm_up(app, [Path(p) for p in args.runs])
    serve(app, args.host, args.port, token, allowed)
    return 0


STRICT_HELP = "fail on duplicate ranks or traces from another run instead of skipping them"
ANALYZE_STRICT_HELP = (
    STRICT_HELP + "; and after writing the report, exit with code 7 when it is not about the "
    "whole run: the run failed, is incomplete or still running (run.json, ranks/), ranks are "
    "missing (fewer analysed than the world size, ranks left out with --ranks aside), a file "
    "that could be a trace (.json, .json.gz) was skipped (not profkit's own merged output or "
    "a second name of a file already read), or rank numbers were guessed from file order. "
    "Other notes (cycles joined, steps left out) do not count")


def _add_load_options(p: argparse.ArgumentParser, strict_help: str = STRICT_HELP) -> None:
    p.add_argument("run", help="a profkit run directory, a folder of torch.profiler traces, or one trace file")
    _add_read_options(p, strict_help)


def _add_read_options(p: argparse.ArgumentParser, strict_help: str = STRICT_HELP) -> None:
    p.add_argument("--no-cache", action="store_true", help="ignore and do not write the ingest cache")
    p.add_argument("--strict", action="store_true", help=strict_help)
    p.add_argument("--ranks", help="only these ranks, e.g. 0,2,4-7")
    p.add_argument("--cycle", type=_cycle, metavar="K",
                   help="only profiler cycle K of each rank (0 is the first; by default every "
                   "cycle is read, as steps of its rank), or on-demand capture K of a folder "
                   "of captures")
    p.add_argument("--workers", type=int, help="traces parsed at once (default: the CPU count, "
                   "fewer when free memory is short)")
    _add_classify_option(p)


def _add_analysis_options(p: argparse.ArgumentParser) -> None:
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


def _add_classify_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--classify", type=Path, metavar="FILE",
                   help="kernel classification rules (TOML: [[rule]] pattern = REGEX, class = "
                   "compute|communication|memcpy|memset, subclass = ...), tried before the "
                   "built-in ones and [tool.profkit.classify] of the project's pyproject.toml")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _add_report_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("text", "json", "markdown", "html"), default="text",
                   help="text (a terminal), json (the full contract), markdown (a pull request) "
                   "or html (one self-contained page, no external URL)")
    p.add_argument("-o", "--output", type=Path, help="write the report here instead of stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="profkit", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"profkit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("merge", help="merge per-rank traces into one Perfetto trace",
                       description="Merge every rank's trace into one Chrome/Perfetto trace: "
                       "ranks as processes, clocks aligned, NVML samples as counter tracks.")
    _add_load_options(p)
    p.add_argument("-o", "--output", type=Path,
                   help="output .json or .json.gz (default: <run name>.merged.json.gz)")
    p.add_argument("--steps", help="keep only ProfilerSteps A:B (inclusive), e.g. 5:7")
    p.add_argument("--window", help="keep only START_MS:END_MS after the run's first event")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("summary", help="a short per-rank summary of a run",
                       description="Print what each rank captured and where its GPU time went.")
    _add_load_options(p)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("analyze", help="bottleneck verdict, evidence and recommendations",
                       description="Say per rank and for the run whether the job is bound by "
                       "compute, communication, CPU launch, data loading or host synchronisation, "
                       "who the straggler is, and what to change.")
    _add_load_options(p, ANALYZE_STRICT_HELP)
    _add_analysis_options(p)
    p.add_argument("--flops-per-step", type=_positive, metavar="FLOP",
                   help="the model's FLOPs of one step on one rank (e.g. 6 x parameters x "
                   "tokens): MFU from these instead of the FLOPs counted from the trace")
    p.add_argument("--peak-tflops", type=_positive, metavar="TFLOPS",
                   help="dense peak TFLOP/s of one device to judge MFU against (default: the "
                   "device's datasheet peak for the precisions the GEMMs ran in)")
    _add_report_options(p)
    p.add_argument("--tables", type=Path, metavar="DIR",
                   help="also write every analysis table into DIR, one file per table and an "
                   "index.json; DIR appears whole or not at all, and replaces only an earlier "
                   "--tables output or an empty folder")
    p.add_argument("--tables-format", choices=("csv", "parquet"), default="csv",
                   help="file format of --tables (default: csv)")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("diff", help="did my change help? step time before and after, attributed",
                       description="Compare the steady steps of two runs: the step-time "
                       "change with its confidence interval, a verdict (improved, regressed, "
                       "unchanged, or not comparable for another workload), warnings for "
                       "other GPUs or world size, straggler changes, and the change attributed "
                       "to breakdown parts, kernels and ops per step.")
    p.add_argument("base", help="the run before the change")
    p.add_argument("new", help="the run after the change")
    _add_read_options(p)
    _add_analysis_options(p)
    _add_report_options(p)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("dashboard", help="browse runs, analyses and diffs in a local web app",
                       description="Serve the dashboard on this machine: runs, verdicts, "
                       "timelines, kernels, communication, counters and diffs.")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="runs to show (default: the bundled sample runs, unless --root is given)")
    p.add_argument("--root", type=Path, action="append",
                   help="a folder whose run folders are listed (rescanned on the Runs page)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port (default: 8050)")
    p.add_argument("--token", nargs="?", const=NEW_TOKEN, metavar="TOKEN",
                   help="require this token (at least 16 characters; alone: a random one, "
                   f"printed in the address) on every request; also from ${TOKEN_ENV}. "
                   "Requests without it get 401")
    p.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="also answer requests for this host name (repeatable; also from "
                   "$PROFKIT_DASHBOARD_ALLOWED_HOSTS, comma-separated). By default only "
                   "loopback names and the --host address are answered: a page of another "
                   "site that points its name at this machine gets 421")
    p.set_defaults(func=cmd_dashboard)

    # The options are declared here, not in the launch module, so that `profkit --help`
    # imports no capture code; tests/collectors/test_launch_cli.py checks they agree.
    p = sub.add_parser("launch", help="run a command with NCCL logging and flight recorder on",
                       description="profkit launch --run-dir DIR -- torchrun ... : sets NCCL_DEBUG, "
                       "NCCL_DEBUG_FILE, the flight recorder and PROFKIT_RUN_DIR for the command; "
                       "exits with its exit code.")
    p.add_argument("--run-dir", required=True, type=Path,
                   help="run directory (created if missing); the job's profile() calls default to it")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the command, after '--' (e.g. -- torchrun --nproc_per_node 8 train.py)")
    p.set_defaults(func=cmd_launch)
    return parser


def _use_rules(args) -> None:
    """Classify with --classify FILE's rules, then the project's (read now, so that a bad
    rule stops the command before any trace is read)."""
    from profkit.classify_rules import load_rules, use_rules

    use_rules(load_rules(getattr(args, "classify", None), Path.cwd()))


def main(argv: list[str] | None = None) -> int:
    """The ``profkit`` program (``argv`` None: the command line). As the program, a command
    stopped by SIGTERM or SIGINT ends every process it started, then itself, by that signal
    (:class:`profkit.children.SignalStop`); ``launch`` forwards SIGTERM to its job instead.
    Called with ``argv`` (tests, notebooks), the caller's signal handling is left alone."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="profkit: %(message)s")
    if argv is not None or args.func is cmd_launch:
        return _run(args)
    from profkit.children import SignalStop

    with SignalStop() as stop:
        code = _run(args)
    if stop.signum is not None:
        stop.exit()
    return code


def _run(args) -> int:
    try:
        if hasattr(args, "classify"):
            _use_rules(args)
        return args.func(args)
    except ProfkitError as exc:
        print(f"profkit: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # stdout's reader (| head) closed it; point stdout at /dev/null so that the flush at
        # exit does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports it
    except OSError as exc:  # one line naming the file, never a traceback
        print(f"profkit: error: {exc.strerror or exc}"
              f"{f': {exc.filename}' if exc.filename else ''}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, or SignalStop's SIGTERM
        print(f"profkit: {'stopped by ' + str(exc) if str(exc) else 'interrupted'}",
              file=sys.stderr)
        return 130
    finally:
        from profkit.classify_rules import use_rules

        use_rules(None)  # main() may run again in this process (tests, notebooks)

if __name__ == "__main__":
    sys.exit(main())
