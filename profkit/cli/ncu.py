"""``profkit ncu RUN -- COMMAND``: Nsight Compute counters for the kernels that take the
time in RUN, measured by rerunning COMMAND under ncu and stored in ``RUN/ncu/``
(:mod:`profkit.collectors.tools.ncu_capture`); ``profkit analyze RUN`` then shows them beside its
kernels."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from profkit.cli.options import add_load_options
from profkit.errors import UsageError

log = logging.getLogger(__name__)
DESCRIPTION = (
    "Rerun COMMAND (the job RUN was captured from) under NVIDIA Nsight Compute, measuring "
    "only the kernels with the most time in RUN's analysis (a few launches of each, past "
    "the first calls): DRAM throughput and bytes, SM, tensor and FP32 pipes, achieved "
    "occupancy, L2 hit rate, warp stalls. Stored in RUN/ncu/ (ncu's .ncu-rep and a table); "
    "profkit analyze RUN joins them to its kernels. Clocks are left as they are.")


def add_ncu_parser(sub) -> None:
    p = sub.add_parser("ncu", help="Nsight Compute counters for the run's top kernels",
                       description=DESCRIPTION,
                       usage="profkit ncu [options] RUN -- COMMAND [ARG ...]")
    add_load_options(p)
    p.add_argument("--max-kernels", type=_positive_int, default=5, metavar="N",
                   help="measure at most N kernels, those with the most GPU time (default 5)")
    p.add_argument("-k", "--kernel", action="append", metavar="REGEX",
                   help="measure the kernels whose name (full or short, as the report shows "
                   "it) matches REGEX, case-insensitive; repeat for more (still at most "
                   "--max-kernels)")
    p.add_argument("--launches", type=_positive_int, default=3, metavar="C",
                   help="launches measured of each kernel's launch configuration (default 3)")
    p.add_argument("--skip-steps", type=_count, default=2, metavar="S",
                   help="skip S steps' worth of launches of the least frequent chosen kernel "
                   "before measuring, so that no first call is measured (default 2)")
    p.add_argument("--launch-skip", type=_count, metavar="L",
                   help="skip exactly L launches of each launch configuration (instead of "
                   "--skip-steps)")
    p.add_argument("--ncu", metavar="PATH", help="the ncu executable (default: found on PATH, "
                   "$CUDA_HOME/bin, /usr/local/cuda/bin, /opt/nvidia/nsight-compute)")
    p.add_argument("--ncu-option", action="append", default=[], metavar="OPT",
                   help="pass OPT on to ncu (repeat for more; e.g. --ncu-option=--cache-control "
                   "--ncu-option=none)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the kernels, the time estimate and the ncu command; run nothing")
    p.set_defaults(func=cmd_ncu, command=[])


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``profkit [-v] ncu ... -- COMMAND``: (the arguments before ``--``, COMMAND); the
    command is split off before parsing so that its own options are never profkit's."""
    sub = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if sub is None or argv[sub] != "ncu" or "--" not in argv[sub:]:
        return argv, None
    cut = argv.index("--", sub)
    return argv[:cut], argv[cut + 1:]


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def cmd_ncu(args) -> int:
    from profkit.analyzers.measure.ncu import rank_steps, select_kernels
    from profkit.cli.analyze import _cached_analysis, _thresholds
    from profkit.collectors.collector_errors import NcuError
    from profkit.collectors.tools import ncu_capture as capture
    from profkit.run.discover import run_folder

    command = list(args.command)
    if not command:
        raise UsageError("profkit ncu RUN -- COMMAND: name the command to measure after '--' "
                         "(the one RUN was captured from, e.g. -- python train.py)")
    analysis = _cached_analysis(args, args.run, _thresholds(args), "text")
    eff = analysis.table("efficiency")
    names = [*eff.get("device_name", []), *eff.get("device_model", [])] if len(eff) else []
    if capture.is_amd(names):
        raise NcuError(f"{args.run} ran on an AMD GPU. {capture.AMD_ADVICE}")
    top = analysis.table("top_kernels")
    kernels = select_kernels(top, rank_steps(eff), args.max_kernels, args.kernel or ())
    if not kernels:
        what = f"matching {' or '.join(args.kernel)}" if args.kernel else "to measure"
        raise UsageError(f"{args.run}: no kernel {what} (its analysis lists {len(top)})")
    skip = args.launch_skip if args.launch_skip is not None else \
        capture.default_skip(kernels, args.skip_steps)
    plan = capture.NcuPlan(kernels=tuple(kernels), launch_count=args.launches,
                           launch_skip=skip, extra_args=tuple(args.ncu_option))
    _print_plan(plan)
    if args.dry_run:  # a plan needs no ncu: without one the command names plain `ncu`
        try:
            ncu = capture.find_ncu(args.ncu)
        except NcuError as exc:
            print(f"note: {exc}", file=sys.stderr)
            ncu = args.ncu or "ncu"
        folder = run_folder(Path(args.run)) / "ncu"
        argv = capture.ncu_argv(ncu, plan, ["<metrics>"], folder / "report.ncu-rep",
                                folder / "ncu.log", command)
        print(shlex.join(argv))
        return 0
    ncu = capture.find_ncu(args.ncu)
    out = capture.profile_kernels(run_folder(Path(args.run)), plan, command, ncu,
                                  top["name"].astype(str).tolist() if len(top) else [])
    _print_result(out, kernels)
    return 0


def _print_plan(plan) -> None:
    from profkit.classify.names import short_kernel_names
    from profkit.collectors.tools.ncu_capture import plan_text

    print(plan_text(plan), file=sys.stderr)
    shorts = short_kernel_names([k["name"] for k in plan.kernels])
    for k, short in zip(plan.kernels, shorts):
        print(f"  {short:50} {k['calls_per_step']:g} call(s)/step, {k['share']:.1%} of kernel "
              "time", file=sys.stderr)


def _print_result(out: dict, kernels: list[dict]) -> None:
    from profkit.classify.names import short_kernel_name

    rows, meta = out["rows"], out["meta"]
    chosen = {k["name"] for k in kernels}
    print(f"wrote {out['folder']}: {len(rows)} launch(es) measured in {meta['elapsed_s']:.0f} s "
          f"(estimate {meta['estimate_s']:.0f} s); read them with: profkit analyze "
          f"{out['folder'].parent}")
    print(f"  {'kernel':50} {'us':>8} {'DRAM %':>7} {'SM %':>6} {'tensor %':>9}")
    for r in rows:
        mark = "" if r["trace_kernel"] in chosen else "  (not chosen: its name matched)"
        print(f"  {short_kernel_name(r['trace_kernel'] or r['kernel'])[:50]:50} "
              f"{r['duration_ns'] / 1e3:8.1f} {r['dram_pct']:7.1f} {r['sm_pct']:6.1f} "
              f"{r['tensor_pct']:9.1f}{mark}")
    missing = [k["name"] for k in kernels if k["name"] not in {r["trace_kernel"] for r in rows}]
    for name in missing:
        log.warning("not measured: %s (fewer launches than --launch-skip + 1?)",
                    short_kernel_name(name))
