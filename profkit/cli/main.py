"""The ``profkit`` command line: the parser of every command, and :func:`main`, the only place
that sets up logging and maps errors to exit codes."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from profkit import __version__
from profkit.cli.analyze import SLOWER_EXIT, cmd_analyze, cmd_diff
from profkit.cli.ncu import add_ncu_parser, cmd_ncu, split_command
from profkit.cli.options import (
    ANALYZE_STRICT_HELP,
    add_analysis_options,
    add_load_options,
    add_read_options,
    add_report_options,
    as_program,
    number_pair,
    percent,
    positive_number,
)
from profkit.cli.read import cmd_merge, cmd_summary
from profkit.cli.serve import NEW_TOKEN, TOKEN_ENV, cmd_dashboard, cmd_launch
from profkit.errors import ProfkitError

DESCRIPTION = ("GPU profiling and bottleneck analysis for PyTorch: merge per-rank traces into one "
               "timeline, say what bounds a job and what to change, compare two runs, and browse "
               "them in a local dashboard.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="profkit", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"profkit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("merge", help="merge per-rank traces into one Perfetto trace",
                       description="Merge every rank's trace into one Chrome/Perfetto trace: "
                       "ranks as processes, clocks aligned, NVML samples as counter tracks.")
    add_load_options(p)
    p.add_argument("-o", "--output", type=Path,
                   help="output .json or .json.gz (default: <run name>.merged.json.gz)")
    p.add_argument("--steps", help="keep only ProfilerSteps A:B (inclusive), e.g. 5:7")
    p.add_argument("--window", help="keep only START_MS:END_MS after the run's first event")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print the summary")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("summary", help="a short per-rank summary of a run",
                       description="Print what each rank captured and where its GPU time went.")
    add_load_options(p)
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("analyze", help="bottleneck verdict, evidence and recommendations",
                       description="Say per rank and for the run whether the job is bound by "
                       "compute, communication, CPU launch, data loading or host synchronisation, "
                       "who the straggler is, and what to change.")
    add_load_options(p, ANALYZE_STRICT_HELP)
    add_analysis_options(p)
    p.add_argument("--flops-per-step", type=positive_number, metavar="FLOP",
                   help="the model's FLOPs of one step on one rank (e.g. 6 x parameters x "
                   "tokens): MFU from these instead of the FLOPs counted from the trace")
    p.add_argument("--peak-tflops", type=positive_number, metavar="TFLOPS",
                   help="dense peak TFLOP/s of one device to judge MFU against (default: the "
                   "device's datasheet peak for the precisions the GEMMs ran in)")
    add_report_options(p)
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
                       "unchanged, or not comparable for another model), judged per sample "
                       "or token when the batch changed, what kind of change it was (compiled, "
                       "fused, bf16, flash attention, CUDA graphs, DataLoader workers, ...), "
                       "warnings for other GPUs or world size, straggler changes, and the "
                       "change attributed to breakdown parts, kernel groups, kernels and ops.")
    p.add_argument("base", help="the run before the change")
    p.add_argument("new", help="the run after the change")
    add_read_options(p)
    add_analysis_options(p)
    add_report_options(p)
    p.add_argument("--items-per-step", type=number_pair, metavar="BASE,NEW",
                   help="samples (or tokens, or any unit of work) one step of each run "
                   "processed, e.g. 8,32: judge the time per item, not per step (by default "
                   "the batch is read from the model's input shapes when the trace has them)")
    p.add_argument("--fail-if-slower", type=percent, metavar="PCT",
                   help=f"exit with code {SLOWER_EXIT} when the new run is surely more than "
                   "PCT%% slower: the lower end of the change's confidence interval above PCT "
                   "(noise never trips it; a pair that is not comparable never does)")
    p.set_defaults(func=cmd_diff)

    add_ncu_parser(sub)

    p = sub.add_parser("dashboard", help="browse runs, analyses and diffs in a local web app",
                       description="Serve the dashboard on this machine: runs, verdicts, "
                       "timelines, kernels, communication, counters and diffs.")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="runs to show: run folders or trace files (with neither RUN nor "
                   "--root: the sample runs of a source checkout of profkit, where there are "
                   "some; an installed profkit has none)")
    p.add_argument("--root", type=Path, action="append",
                   help="a folder whose run folders are listed (rescanned on the Runs page)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port (default: 8050)")
    access = p.add_mutually_exclusive_group()
    access.add_argument("--token", nargs="?", const=NEW_TOKEN, metavar="TOKEN",
                        help="the token every request must carry (default: a random one, "
                        "printed in the address to open, as Jupyter does; also from "
                        f"${TOKEN_ENV}, which other users cannot read in the process list as "
                        "they can --token VALUE; at least 16 characters). Requests without "
                        "it get 401")
    access.add_argument("--no-token", dest="use_token", action="store_false",
                        help="ask for no token: anyone who can open the port (any user of "
                        "this machine, on 127.0.0.1) can read the runs and download their "
                        "traces")
    p.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="also answer requests for this host name (repeatable; also from "
                   "$PROFKIT_DASHBOARD_ALLOWED_HOSTS, comma-separated). By default only "
                   "loopback names and the --host address are answered: a page of another "
                   "site that points its name at this machine gets 421")
    p.add_argument("--no-background", dest="background", action="store_false",
                   help="analyse a listed run only when one of its pages is opened, not "
                   "every run the Runs page lists in the background (a root of many runs on "
                   "a shared machine); the runs named on the command line are still "
                   "analysed at start")
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
    from profkit.classify.rules import load_rules, use_rules

    use_rules(load_rules(getattr(args, "classify", None), Path.cwd()))


def main(argv: list[str] | None = None) -> int:
    """The ``profkit`` program (``argv`` None: the command line). As the program, a command
    stopped by SIGTERM or SIGINT ends every process it started, then itself, by that signal
    (:class:`profkit.children.SignalStop`); ``launch`` forwards SIGTERM to its job instead.
    Called with ``argv`` (tests, notebooks), the caller's signal handling is left alone."""
    parser = build_parser()
    given = argv
    argv, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    if command is not None:
        args.command = command
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="profkit: %(message)s")
    if given is not None or args.func is cmd_launch:
        return _run(args)
    if args.func is not cmd_ncu:  # ncu runs the user's program: it keeps its environment
        _one_blas_thread()
    as_program()
    from profkit.children import SignalStop

    with SignalStop() as stop:
        try:
            code = _run(args)
            stop.finish()  # done: a Ctrl-C during Python's shutdown no longer kills it
        except BaseException:  # stopped: an echo of the stop (a pool whose workers it
            if stop.signum is None:  # ended), or the stop itself, outside _run's handler
                raise
            code = None
    if stop.signum is not None:
        if code != 130:  # the stop's own line was not said (_run says it for Stopped)
            print(f"profkit: stopped by {signal.Signals(stop.signum).name}", file=sys.stderr)
        stop.exit()
    _end_now(code)
    return code


def _one_blas_thread() -> None:
    """Let numpy's OpenBLAS start no threads of its own (unless the user chose a number): the
    analysis does no matrix products, and after numpy's import each idle BLAS thread spins
    for a while before it sleeps (0.05 CPU s a process, on a core the pool's workers want:
    on the 2 x 75 MB run a cold analyze took ~0.08 CPU s less)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _end_now(code: int | None) -> None:
    """End the program once a command is done: the exit handlers run and the output is
    flushed as at any exit, but Python's teardown, which frees every object of the analysis
    one by one (~0.15 s after a large run), is left to the OS. Not while a thread that
    Python would wait for still runs."""
    import atexit
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate()
           if t is not threading.main_thread()):
        return
    atexit._run_exitfuncs()  # logging's shutdown (flushes its handlers) among them
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away after the command: as _run says it
        code = 141
    except OSError as exc:
        print(f"profkit: error: cannot write standard output: {exc.strerror or exc}",
              file=sys.stderr)
        code = 1
    except ValueError:  # closed by the command: nothing left to write
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code or 0)


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
        from profkit.classify.rules import use_rules

        use_rules(None)  # main() may run again in this process (tests, notebooks)

if __name__ == "__main__":
    sys.exit(main())
