"""``profkit merge`` and ``profkit summary``: commands that read a run without analysing it."""

from __future__ import annotations

import sys
from pathlib import Path

from profkit.cli.options import imports, load, parse_span
from profkit.textout import plural, ranks_text, terminal_width


def cmd_merge(args) -> int:
    with imports():
        from profkit.run.summary import format_summary
        from profkit.timeline.merge import merge_run
        from profkit.timeline.window import window_for

    run = load(args)
    output = args.output or Path(f"{Path(args.run).resolve().name}.merged.json.gz")
    window = window_for(run, parse_span(args.steps, "--steps"), parse_span(args.window, "--window"))
    report = merge_run(run, output, window=window)
    for skipped in report.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    print(f"wrote {report.output}: {plural(report.events_written, 'event')} from "
          f"{ranks_text(report.ranks)} (open it at https://ui.perfetto.dev)")
    if not args.quiet:
        print(format_summary(run, terminal_width(sys.stdout.isatty())))
    return 0


def cmd_summary(args) -> int:
    with imports():
        from profkit.run.summary import format_summary

    print(format_summary(load(args), terminal_width(sys.stdout.isatty())))
    return 0
