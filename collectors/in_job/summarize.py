"""The in-job summary of ``profile(summarize=True)``: the run's analysis, written by rank 0
into the run directory the moment the capture ends.

After a capture session without a trigger has stopped, every rank has written its own
status (``ranks/rank{R}.json``, and rank 0 run.json) before any of this runs. Then:

- a rank whose capture failed (its code raised, saving failed) puts a short ``failed:
  <reason>`` value into the job's key-value store and returns at once: no summary work, no
  waiting, so its exception goes on unchanged (:mod:`profkit.collectors.in_job.store`);
- every other rank reduces its own trace (the first cycle's, when the schedule repeats) to
  a rank summary (the map of :mod:`profkit.analyzers.executor`, ``summarize_file``) and puts
  it into the store; ranks other than 0 return without waiting for anyone;
- rank 0, after its own summary, polls the store for the others' values for at most
  :func:`summary_timeout_s` seconds (``$PROFKIT_SUMMARY_TIMEOUT_S``, 300 by default); a
  rank whose status on disk says it failed (a rank ended by SIGTERM puts nothing) is not
  waited for. It reduces what arrived (``reduce_results``, the same reduce as ``profkit
  analyze``) and writes ``profkit-report/report.json`` (the ``profkit.analysis/1`` JSON of
  ``profkit analyze --format json``) and ``profkit-report/report.txt`` atomically. Ranks that
  failed or never answered are listed as skipped with the reason; the run's status is
  ``failed`` or ``incomplete`` and the text report says so in its first lines.

No collective runs, so the backend of the process group (gloo or NCCL) does not matter, a
failing rank cannot meet the others' next training collective, and the user may have
destroyed the process group before the context exits: the store is taken when the capture
starts and keeps working. Without torch.distributed (one process) the one process writes
the report alone. Rank 0 failing means no report (its statuses and traces are on disk for
``profkit analyze``); it does not wait either.

The report lives in its own ``profkit-report/`` folder because a ``.json`` file at the top
of a run directory would be read as a trace; the loader does not look inside that folder.

This never raises into the user's code (a failure is logged as a warning and costs only the
report). Its limits:

- the bound counts from the end of rank 0's own summary; a rank that takes longer for its
  summary is reported as never answered, and its late value stays in the store until the
  job ends. A rank ended by a signal, when the run directory is not shared with rank 0,
  is only known to be missing after the bound.
- values wait in the store's memory until rank 0 reads (and deletes) them: 40-100 KiB per
  rank for the bundled runs, so about 100 MB for a thousand ranks, held by the store
  server (under torchrun the agent on the master node); over 4 MiB a value goes in parts,
  over 256 MiB it is replaced by an error (see :mod:`~profkit.collectors.in_job.store`).
- a SIGTERM while rank 0 waits (torchrun stopping the job) ends it without a report.
- a process group made without torchrun has its store served by rank 0's process: when
  rank 0 has already exited, the others' values are lost (logged as a warning).
- with ``WORLD_SIZE`` > 1 but no process group at capture start there is no store: no
  report, a warning.

Every rank of the job must ask for the summary alike (same ``profile()`` arguments), as for
the capture itself.

Layering: the capture side does not depend on the analyzers, except for this module, which
imports ``profkit.analyzers`` (and with it pandas) lazily, inside functions, and only when
a summary was asked for and profiling has stopped; a failing rank imports neither.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

from profkit.collectors.capture.session import RANK_STATUS_NAME, RANKS_DIR, TRACE_NAME, TRACES_DIR
from profkit.collectors.collector_errors import CollectorError
from profkit.collectors.in_job import store as kv
from profkit.collectors.job_facts import run_document
from profkit.collectors.run_dir_writes import write_bytes_atomic

from profkit.errors import error_text
from profkit.textout import plural

log = logging.getLogger(__name__)

REPORT_DIR = "profkit-report"
REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
TIMEOUT_ENV = "PROFKIT_SUMMARY_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0
STATUS_INCOMPLETE = run_document.STATUS_INCOMPLETE  # a rank never answered, or lost a write


def summary_timeout_s() -> float:
    """Seconds rank 0 waits for the other ranks' summaries: ``$PROFKIT_SUMMARY_TIMEOUT_S``,
    else 300. No other rank ever waits."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def summarize_job(session: Any) -> Path | None:
    """Run the in-job summary for the stopped capture ``session`` (a
    :class:`~profkit.collectors.capture.session.CaptureSession`); every rank calls this. Returns the
    JSON report's path on rank 0 when written, else None. Never raises (an ``Exception``)."""
    try:
        return _summarize_job(session)
    except Exception as exc:  # noqa: BLE001 - the report is optional, the job is not
        log.warning("profkit: no in-job summary of %s (%s: %s)", getattr(session, "dir", "?"),
                    type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        if isinstance(exc, OSError) and hasattr(session, "record_lost"):  # listed as lost
            session.record_lost("report", getattr(exc, "path", None), exc)
        return None


def _summarize_job(session: Any) -> Path | None:
    info = session.info
    if info is None:  # never started: nothing to summarise
        return None
    failed = session.status == run_document.STATUS_FAILED
    if info.world_size == 1:
        return None if failed else _write_report(Path(session.dir), own_result(session))
    if session.store is None:
        raise CollectorError("torch.distributed was not initialised when the capture "
                             "started: no key-value store to hand the summaries to rank 0")
    timeout_s = summary_timeout_s()
    if failed:  # tell rank 0 and let the exception go on; rank 0 itself just stops
        if info.rank != 0:
            _put(session, kv.failed_value(error_text(session.error)), timeout_s)
        return None
    mine = own_result(session)
    if info.rank != 0:
        _put(session, encoded(mine), timeout_s)
        return None
    with kv.bounded(session.store, timeout_s) as store:
        arrivals = kv.collect(store, session.run_id, range(1, info.world_size), timeout_s,
                              failed_on_disk=functools.partial(
                                  failed_on_disk, Path(session.dir), session.run_id))
    return _write_report(Path(session.dir), mine, arrivals, timeout_s)


def _put(session: Any, value: bytes, timeout_s: float) -> None:
    with kv.bounded(session.store, timeout_s) as store:
        kv.put(store, session.run_id, session.info.rank, value)
    log.debug("profkit: rank %d put its summary (%d bytes)", session.info.rank, len(value))


def encoded(result: Any) -> bytes:
    """A rank's result as the value it puts: its ``FileResult`` as data, or an ``error:``
    value (the result is a string saying why there is none, or cannot be stored)."""
    if isinstance(result, str):
        return kv.error_value(result)
    from profkit import datacodec

    try:
        return datacodec.encode(result)
    except datacodec.CodecError as exc:
        return kv.error_value(f"{result.path}: summary cannot be stored as data ({exc})")


def decoded(rank: int, value: bytes, run_dir: Path) -> Any:
    """The ``FileResult`` rank ``rank`` put (an error result when it is none)."""
    import profkit.analyzers.summaries  # noqa: F401 - registers RankSummary for decode
    from profkit.analyzers.executor import FileResult

    from profkit import datacodec

    path = str(default_trace_path(run_dir, rank))
    text = kv.text_of(value, kv.ERROR)
    if text is not None:
        return FileResult(path, error=text)
    try:
        result = datacodec.decode(value)
    except datacodec.CodecError as exc:
        return FileResult(path, error=f"rank {rank} sent an unreadable summary ({exc})")
    if not isinstance(result, FileResult):
        return FileResult(path, error=f"rank {rank} sent a {type(result).__name__}, "
                                      "not a summary")
    return result


def failed_on_disk(run_dir: Path, run_id: str, rank: int) -> str | None:
    """Why ``rank`` failed, when its status file of this run says it did, else None."""
    path = run_dir / RANKS_DIR / RANK_STATUS_NAME.format(rank=rank)
    try:
        status = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if (isinstance(status, dict) and status.get("status") == run_document.STATUS_FAILED
            and status.get("run_id") == run_id):
        return error_text(status.get("error"))
    return None


def default_trace_path(run_dir: Path, rank: int) -> Path:
    return Path(run_dir) / TRACES_DIR / TRACE_NAME.format(rank=rank)


def trace_path(session: Any) -> Path:
    """This rank's first-cycle trace (where it would be, if none was written)."""
    if session.traces:
        return Path(session.traces[0])
    return default_trace_path(Path(session.dir), session.info.rank)


def own_result(session: Any) -> Any:
    """This rank's ``FileResult``: its trace's summary, or an error saying why there is
    none (it wrote no trace). Never raises; when even the analyzers cannot be imported,
    the error is a plain string."""
    rank = session.info.rank
    path = trace_path(session)
    try:
        from profkit.analyzers.executor import FileResult, plan_tasks, summarize_file

        from profkit.run.loader import read_run_json

        if not session.traces:
            return FileResult(str(path), error=no_trace_reason(session))
        folder = Path(session.dir)
        (task,) = plan_tasks(folder, run_meta(session, read_run_json(folder)), [path],
                             use_cache=True, thresholds=None)
        return summarize_file(task)
    except Exception as exc:  # noqa: BLE001 - still tell rank 0 why
        log.warning("profkit: rank %d could not summarise its trace", rank, exc_info=True)
        return f"rank {rank} could not summarise its trace ({type(exc).__name__}: {exc})"


def no_trace_reason(session: Any) -> str:
    """Why this rank has no trace: its capture stopped on a failed write, or the schedule
    saved none yet."""
    rank = session.info.rank
    stopped = getattr(getattr(session, "losses", None), "stopped", None)
    if stopped:
        return (f"rank {rank} wrote no trace: its capture stopped at step {stopped['step']} "
                f"({stopped['file'] or stopped['what']}: {stopped['cause']})")
    return (f"rank {rank} wrote no trace ({plural(session.steps, 'step')} recorded; the "
            "schedule saves a trace after wait + warmup + active steps)")


def run_meta(session: Any, run_json: dict[str, Any]) -> dict[str, Any]:
    """The run facts this rank's map needs: run.json's when this rank can read it (rank 0
    wrote it at start), else the same gpus and clock offsets as the session knows them (a
    run directory on a disk of each host's own)."""
    if run_json:
        return run_json
    host = session.info.host
    gpus = [g for g in session.run_facts.get("gpus") or [] if g.get("host") in (None, host)]
    return {"gpus": gpus, "clock_offsets_ns": session.run_facts.get("clock_offsets_ns") or {}}


def rank_problems(arrivals: kv.Arrivals, timeout_s: float) -> dict[int, str]:
    """Why each rank without a summary has none: its failure, or that it never answered."""
    problems = {r: f"failed: {why}" for r, why in arrivals.failed.items()}
    problems.update({r: f"sent no summary within {timeout_s:g} s (still running, hung or "
                        "killed)" for r in arrivals.missing})
    return dict(sorted(problems.items()))


def report_meta(run_json: dict[str, Any], arrivals: kv.Arrivals,
                problems: dict[int, str]) -> dict[str, Any]:
    """run.json's facts, with the run's status as rank 0 now knows it: ``failed`` when a
    rank failed, ``incomplete`` when ranks only never answered; ``rank_errors`` says why."""
    meta = dict(run_json)
    if arrivals.failed:
        meta["status"] = run_document.STATUS_FAILED
    elif arrivals.missing and meta.get("status") != run_document.STATUS_FAILED:
        meta["status"] = STATUS_INCOMPLETE
    meta["rank_errors"] = {**(meta.get("rank_errors") or {}), **{
        str(r): why.removeprefix("failed: ") for r, why in problems.items()}}
    return meta


def _write_report(run_dir: Path, own: Any, arrivals: kv.Arrivals | None = None,
                  timeout_s: float = 0.0) -> Path:
    """Rank 0: reduce its own result and the arrived ones, the ranks without one skipped
    with the reason, and write the report files; returns the JSON's path."""
    import orjson
    from profkit.analyzers.executor import FileResult, reduce_results
    from profkit.analyzers.report.render import to_json, to_text

    from profkit.run.loader import read_run_json

    arrivals = arrivals or kv.Arrivals()
    if isinstance(own, str):  # rank 0 could not summarise its trace
        own = FileResult(str(default_trace_path(run_dir, 0)), error=own)
    results = [own] + [decoded(r, v, run_dir) for r, v in sorted(arrivals.values.items())]
    problems = rank_problems(arrivals, timeout_s)
    results += [FileResult(str(default_trace_path(run_dir, r)), error=f"rank {r} {why}")
                for r, why in problems.items()]
    meta = report_meta(read_run_json(run_dir), arrivals, problems)
    analysis = reduce_results(run_dir, meta, [Path(r.path) for r in results], [], results)
    folder = run_dir / REPORT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    dest = write_bytes_atomic(folder / REPORT_JSON,
                              orjson.dumps(to_json(analysis), option=orjson.OPT_INDENT_2) + b"\n")
    write_bytes_atomic(folder / REPORT_TEXT, to_text(analysis).encode())
    log.info("profkit: in-job analysis of %s: %s (%s)", run_dir, analysis.verdict["summary"],
             folder)
    return dest
