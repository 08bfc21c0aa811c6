"""The in-job summary of ``profile(summarize=True)``: the run's analysis, written by rank 0
into the run directory the moment the capture ends.

After a capture session without a trigger has stopped and written its traces, every rank:

1. meets the others at a *monitored* barrier on the gloo control group, which gives up
   after :func:`arrival_timeout_s` seconds (300 by default) if a rank does not arrive (it
   died, or is stuck in a collective of its own that the others left). A rank whose code
   raised therefore waits at most that long before its exception goes on;
2. reduces its own trace (the first cycle's, when the schedule repeats) to a rank summary
   (the map of :mod:`profkit.analyzers.executor`, ``summarize_file``); a rank whose
   capture failed (the user's code raised, or saving failed) sends an error instead, so
   the report lists its trace as skipped and the run as failed;
3. sends it to rank 0 (``gather_object`` on the control group). Rank 0 reduces the
   summaries (``reduce_results``, the same reduce as ``profkit analyze``) and writes
   ``profkit-report/report.json`` (the ``profkit.analysis/1`` JSON of ``profkit analyze --format
   json``) and ``profkit-report/report.txt`` atomically. Without torch.distributed the one
   process does all three alone.

The report lives in its own ``profkit-report/`` folder because a ``.json`` file at the top
of a run directory would be read as a trace; the loader does not look inside that folder.

This never raises into the user's code (a failure is logged as a warning and costs only the
report). Its limits, documented here rather than worked around:

- no new process group is created, so no new timeout: past the barrier every rank is known
  to be alive and the gather waits for the slowest rank's summary, bounded only by the
  control group's timeout (``init_process_group``'s, 30 min by default). A rank killed
  meanwhile makes the others' gather fail at once (its connections close). The same holds
  for the barrier when no gloo control group could be made (a plain barrier then).
- a rank that reached the barrier early gives up ``arrival_timeout_s`` after *its* arrival;
  if the last rank arrives just then, rank 0 may pass the barrier while that rank left, and
  rank 0's gather then waits for the group's timeout (or until that rank exits).
- when the default group is gloo, the control group *is* the default group: reaching the
  barrier while another rank still waits in one of the user's collectives can make that
  collective fail or the barrier time out, and after a timed-out barrier the group's
  message order may stay disturbed; a job should not keep using the default group after a
  summary that failed. With NCCL training the control group is a separate gloo group.

Every rank of the job must ask for the summary alike (same ``profile()`` arguments), as for
the capture itself.

Layering: the capture side does not depend on the analyzers, except for this module, which
imports ``profkit.analyzers`` (and with it pandas) lazily, inside functions, and only when
a summary was asked for and profiling has stopped.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from profkit.collectors import dist as pdist
from profkit.collectors import runmeta
from profkit.collectors.atomic import write_bytes_atomic
from profkit.collectors.session import TRACE_NAME, TRACES_DIR

log = logging.getLogger(__name__)

REPORT_DIR = "profkit-report"
REPORT_JSON = "report.json"
REPORT_TEXT = "report.txt"
TIMEOUT_ENV = "PROFKIT_SUMMARY_TIMEOUT_S"
DEFAULT_ARRIVAL_TIMEOUT_S = 300.0


def arrival_timeout_s() -> float:
    """Seconds the ranks wait for each other at the barrier before giving the summary up:
    ``$PROFKIT_SUMMARY_TIMEOUT_S``, else 300. It also bounds how long a rank that raised
    waits for the others before its exception goes on."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV, DEFAULT_ARRIVAL_TIMEOUT_S))
    except ValueError:
        return DEFAULT_ARRIVAL_TIMEOUT_S
    return value if value > 0 else DEFAULT_ARRIVAL_TIMEOUT_S


def summarize_job(session: Any) -> Path | None:
    """Run the in-job summary for the stopped capture ``session`` (a
    :class:`~profkit.collectors.session.CaptureSession`); every rank calls this. Returns the
    JSON report's path on rank 0 when written, else None. Never raises (an ``Exception``)."""
    try:
        return _summarize_job(session)
    except Exception as exc:  # noqa: BLE001 - the report is optional, the job is not
        log.warning("profkit: no in-job summary of %s (%s: %s)", getattr(session, "dir", "?"),
                    type(exc).__name__, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return None


def _summarize_job(session: Any) -> Path | None:
    info = session.info
    if info is None:  # never started: nothing to summarise
        return None
    distributed = info.world_size > 1
    if distributed and not pdist.dist_ready():
        raise RuntimeError("torch.distributed is not initialised at exit (the process group "
                           "destroyed inside the profile() context?): cannot gather the "
                           "ranks' summaries")
    if distributed:
        _arrive(arrival_timeout_s())
    result = own_result(session)  # never raises
    results = _gather(result, distributed)
    if info.rank != 0:
        return None
    return _write_report(session.dir, results)


def _arrive(timeout_s: float) -> None:
    """Wait until every rank reaches the summary, at most ``timeout_s`` (raises past it)."""
    import torch.distributed as dist

    group = pdist.control_group()
    timeout = timedelta(seconds=timeout_s)
    if dist.get_backend(group) == "gloo":
        dist.monitored_barrier(group=group, timeout=timeout, wait_all_ranks=True)
    else:  # no gloo control group could be made: a plain barrier (the group's timeout)
        dist.barrier(group=group)


def trace_path(session: Any) -> Path:
    """This rank's first-cycle trace (where it would be, if none was written)."""
    if session.traces:
        return Path(session.traces[0])
    return Path(session.dir) / TRACES_DIR / TRACE_NAME.format(rank=session.info.rank)


def own_result(session: Any) -> Any:
    """This rank's ``FileResult``: its trace's summary, or an error saying why there is
    none (its capture failed, it wrote no trace). Never raises; when even the analyzers
    cannot be imported, the error is sent as a plain string."""
    rank = session.info.rank
    path = trace_path(session)
    try:
        from profkit.analyzers.executor import FileResult, plan_tasks, summarize_file

        from profkit.loader import read_run_json

        if session.status == runmeta.STATUS_FAILED:
            err = session.error or {}
            what = ": ".join(str(err[k]) for k in ("type", "message") if err.get(k))
            return FileResult(str(path), error=f"rank {rank} failed: {what or 'capture failed'}")
        if not session.traces:
            return FileResult(str(path), error=(
                f"rank {rank} wrote no trace ({session.steps} step(s) recorded; the schedule "
                "saves a trace after wait + warmup + active steps)"))
        folder = Path(session.dir)
        (task,) = plan_tasks(folder, run_meta(session, read_run_json(folder)), [path],
                             use_cache=True, thresholds=None)
        return summarize_file(task)
    except Exception as exc:  # noqa: BLE001 - still take part in the gather
        log.warning("profkit: rank %d could not summarise its trace", rank, exc_info=True)
        return f"rank {rank} could not summarise its trace ({type(exc).__name__}: {exc})"


def run_meta(session: Any, run_json: dict[str, Any]) -> dict[str, Any]:
    """The run facts this rank's map needs: run.json's when this rank can read it (rank 0
    wrote it at start), else the same gpus and clock offsets as the session knows them (a
    run directory on a disk of each host's own)."""
    if run_json:
        return run_json
    host = session.info.host
    gpus = [g for g in session.run_facts.get("gpus") or [] if g.get("host") in (None, host)]
    return {"gpus": gpus, "clock_offsets_ns": session.run_facts.get("clock_offsets_ns") or {}}


def _gather(result: Any, distributed: bool) -> list[Any]:
    """Every rank's result on rank 0, in rank order (``[]`` on the other ranks)."""
    if not distributed:
        return [result]
    import torch.distributed as dist

    group = pdist.control_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    out: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(result, out, dst=0, group=group)
    return out or []


def _write_report(run_dir: Path, gathered: list[Any]) -> Path:
    """Rank 0: reduce the gathered results and write the report files; returns the JSON's
    path."""
    import orjson
    from profkit.analyzers.executor import FileResult, reduce_results
    from profkit.analyzers.render import to_json, to_text

    from profkit.loader import read_run_json

    run_dir = Path(run_dir)
    results = []
    for rank, res in enumerate(gathered):
        if not isinstance(res, FileResult):  # a rank that could not even build one
            path = run_dir / TRACES_DIR / TRACE_NAME.format(rank=rank)
            res = FileResult(str(path), error=str(res or f"rank {rank} sent nothing"))
        results.append(res)
    analysis = reduce_results(run_dir, read_run_json(run_dir), [Path(r.path) for r in results],
                              [], results)
    folder = run_dir / REPORT_DIR
    folder.mkdir(parents=True, exist_ok=True)
    dest = write_bytes_atomic(folder / REPORT_JSON,
                              orjson.dumps(to_json(analysis), option=orjson.OPT_INDENT_2) + b"\n")
    write_bytes_atomic(folder / REPORT_TEXT, to_text(analysis).encode())
    log.info("profkit: in-job analysis of %s: %s (%s)", run_dir, analysis.verdict["summary"],
             folder)
    return dest
