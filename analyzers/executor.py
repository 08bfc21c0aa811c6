"""``analyze_run``: map every rank's trace file(s) to a rank summary, then reduce them to the
analysis.

The map (:func:`summarize_file`: read one rank's trace, or its profiler cycles' traces
joined, align its clock, attach its NVML samples,
:func:`~profkit.analyzers.summaries.summarize_rank`) runs where the executor puts it:

- in this process (one file, or small runs where starting workers costs more than it saves);
- a local process pool (the default for larger runs), its size limited by free memory;
- a Dask cluster (``scheduler``: an address such as ``tcp://host:8786``, ``"local"`` for a
  ``LocalCluster`` on this machine, or a ``dask.distributed.Client``). Workers read the
  traces by path, so the run must be on storage every worker sees under the same path,
  and they need profkit installed (``pip install 'profkit[cluster]'``).

A task is one rank's files as far as their names tell (:func:`plan_tasks`). Only summaries
travel back, with each file's header facts and the evidence of where it comes from (run id,
host, process, time span, steps); the reduce decides from these which files are which rank's
exactly as the loader does (:mod:`profkit.run.rankfiles`), and has the few ranks whose files no
task summarised together (cycles the names did not group, a stranger grouped by its name)
summarised again. The reduce (:func:`~profkit.analyzers.analyze.combine`) is the same code
for every executor, so their reports are identical. A file that cannot be read, or whose map
fails, is skipped with its reason and never stops the other ranks.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from profkit import children, datacodec
from profkit.classify import events as classify
from profkit.errors import UsageError
from profkit.model import SkippedFile, clock_offset_ns
from profkit.run import cache, discover, loader, rankfiles
from profkit.run.ncufiles import load_ncu_counters
from profkit.run.pool import process_pool, sigint_blocked
from profkit.strings import with_python_strings

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_ENV = "PROFKIT_DASK_TIMEOUT_S"  # seconds to reach a scheduler (default 30)
POOL_MIN_FILES = 8  # below this many files (and PARALLEL_MIN_BYTES), work in this process
# tensorboard_trace_handler's names: {worker}.{time ns}.pt.trace.json[.gz], one per cycle
_WORKER_NAME_RE = re.compile(r"^(.+)\.\d{6,}\.pt\.trace\.json(?:\.gz)?$")


@dataclass
class FileTask:
    """One rank's trace file (or its profiler cycles' files) to summarise, with the few run
    facts the map needs."""

    path: str  # the (first) trace file
    folder: str  # the run's folder (NVML samples of a profkit run directory)
    run_meta: dict[str, Any]  # run.json's gpus (of the file's host) and clock offsets
    use_cache: bool = True
    thresholds: Any = None
    options: Any = None  # AnalysisOptions (step marker, steps)
    rules: Any = None  # the client's classification rules (profkit.classify.rules.Rules)
    paths: list[str] = field(default_factory=list)  # all the files when several (else empty)
    readers: int = 1  # tasks run at once on this machine: they share one memory budget

    @property
    def files(self) -> list[str]:
        return self.paths or [self.path]


@datacodec.register
@dataclass
class FileResult:
    """What the map returns for one task: its header facts and summary, or its error; for
    a task of several files, each file's facts (or error) in ``parts``."""

    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    summary: Any = None
    error: str | None = None
    parts: list[FileResult] = field(default_factory=list)
    sidecars: list[SkippedFile] = field(default_factory=list)  # NVML chunks left out

    def records(self) -> list[FileResult]:
        """One record per file (``path``, ``meta``, ``error``), for the rank assignment."""
        return self.parts or [self]

    def covers(self) -> frozenset[str]:
        """The files the summary was made of (none without a summary)."""
        if self.summary is None:
            return frozenset()
        return frozenset(r.path for r in self.records() if not r.error)


@with_python_strings
def summarize_file(task: FileTask) -> FileResult:
    """The map: one rank's trace file(s) -> its summary. Never raises for a bad file."""
    if task.rules is not None:  # classify as the client does, whatever this worker's folder
        classify.use_rules(task.rules)
    try:
        return _summarize(task, [loader.ingest_file(p, task.use_cache, task.readers)
                                 for p in task.files])
    except MemoryError:
        return _failed(task, "out of memory while analysing this rank")
    except Exception as exc:  # a bug on one rank must not lose the others
        log.exception("%s: analysis failed", task.path)
        return _failed(task, f"analysis failed ({type(exc).__name__}: {exc})")


def _summarize(task: FileTask, ingested: list) -> FileResult:
    from profkit.analyzers.options import DEFAULT_OPTIONS
    from profkit.analyzers.summaries import summarize_rank, trim_meta
    from profkit.analyzers.thresholds import DEFAULT

    from profkit.run.counters import load_counters, with_nvml

    parts = [FileResult(r.path, error=r.error) if r.error else FileResult(r.path, trim_meta(r.meta))
             for r in ingested] if len(ingested) > 1 else []
    good = [r for r in ingested if not r.error]
    files = rankfiles.as_cycles(good) if len(good) > 1 else good
    if not files:  # unreadable, or files that are not one rank's cycles: the reduce decides
        return FileResult(task.path, parts=parts) if parts else \
            FileResult(task.path, error=ingested[0].error)
    rank, source = rankfiles.rank_of(files[0])
    data = loader.rank_data(files, 0 if rank is None else rank, source or "file order")
    del ingested, good, files
    sidecars: list[SkippedFile] = []
    if rank is not None:
        data.counters = with_nvml(data.counters, load_counters(Path(task.folder), rank, sidecars))
    loader.align_clock(data, clock_offset_ns(task.run_meta, data.rank))
    summary = summarize_rank(data, task.run_meta, task.thresholds or DEFAULT,
                             task.options or DEFAULT_OPTIONS)
    return FileResult(task.path, summary.meta, summary, parts=parts,  # trimmed header facts
                      sidecars=sidecars)


def _failed(task: FileTask, error: str) -> FileResult:
    parts = [FileResult(p, error=error) for p in task.paths]
    return FileResult(task.path, error=error, parts=parts)


def plan_tasks(folder: Path, meta: dict[str, Any], files: list[Path], use_cache: bool,
               thresholds, group_cycles: bool = True, options=None) -> list[FileTask]:
    """One task per rank as far as file names tell: profkit's ``rank{R}.cycle{K}`` files,
    and ``tensorboard_trace_handler``'s ``{worker}.{ns}`` files of one worker, together (the
    reduce checks that they are one rank's cycles); every other file alone."""
    groups: dict[tuple, list[Path]] = {}
    for path in files:
        key = _cycle_key(Path(path)) if group_cycles else (str(path),)
        groups.setdefault(key, []).append(Path(path))
    return [task_for(folder, meta, group, use_cache, thresholds, options)
            for group in groups.values()]


def task_for(folder: Path, meta: dict[str, Any], files: list, use_cache: bool,
             thresholds, options=None) -> FileTask:
    """The task of one rank's files, carrying only its host's GPUs (when the file name
    gives its rank) so that a thousand tasks do not each carry the whole run.json."""
    gpus = [g for g in meta.get("gpus") or [] if isinstance(g, dict)]
    declared = meta.get("ranks") if isinstance(meta.get("ranks"), dict) else {}
    rank = discover.rank_from_name(files[0])
    host = (declared.get(str(rank)) or {}).get("host") if rank is not None else None
    mine = [g for g in gpus if g.get("host") in (None, host)] if host else gpus
    run_meta = {"gpus": mine, "clock_offsets_ns": meta.get("clock_offsets_ns") or {}}
    paths = [str(f) for f in files]
    return FileTask(paths[0], str(folder), run_meta, use_cache, thresholds,
                    options=options, rules=classify.active_rules(),
                    paths=paths if len(paths) > 1 else [])


def _cycle_key(path: Path) -> tuple:
    named = discover.profkit_name(path)
    if named:
        return (str(path.parent), "rank", named[0])
    match = _WORKER_NAME_RE.match(path.name)
    # the handler's default worker name is {host}_{pid}: one process; a name with the rank
    # in it is one rank. Any other worker name may be shared by every rank: read alone.
    if match and (re.search(r"_\d+$", match.group(1)) or discover.rank_from_name(match.group(1)) is not None):
        return (str(path.parent), "worker", match.group(1))
    return (str(path),)


@with_python_strings
def analyze_run(path: str | Path, *, scheduler: Any = None, workers: int | None = None,
                cache: bool = True, strict: bool = False, ranks: list[int] | None = None,
                cycle: int | None = None, thresholds=None, options=None,
                progress: Callable[[int, int], None] | None = None,
                flops_per_step: float | None = None, peak_tflops: float | None = None):
    """Analyze the run at ``path`` by map (per rank) and reduce (see module doc);
    ``cycle``: only that profiler cycle of each rank (or that on-demand capture);
    ``options``: an :class:`~profkit.analyzers.options.AnalysisOptions`;
    ``flops_per_step`` / ``peak_tflops`` replace those of ``thresholds`` (MFU options)."""
    from profkit.analyzers.thresholds import with_mfu_options

    thresholds = with_mfu_options(thresholds, flops_per_step, peak_tflops)
    path, cycle = loader.pick_capture(path, cycle)
    root, folder, meta, files, skipped = loader.open_run(path)
    tasks = plan_tasks(folder, meta, files, cache, thresholds, group_cycles=cycle is None,
                       options=options)
    results = list(_run_map(tasks, scheduler, workers, progress))

    def remap(more: list[FileTask]) -> list[FileResult]:
        return list(_run_map(more, scheduler, workers, None))

    return reduce_results(root, meta, files, skipped, results, strict=strict, ranks=ranks,
                          thresholds=thresholds, cycle=cycle, use_cache=cache, remap=remap,
                          options=options)


@with_python_strings
def reduce_results(root: Path, meta: dict[str, Any], files: list[Path],
                   skipped: list[SkippedFile], results: list[FileResult], *,
                   strict: bool = False, ranks: list[int] | None = None, thresholds=None,
                   cycle: int | None = None, use_cache: bool = True, remap=None,
                   options=None):
    """The analysis from the map's results (any order): unreadable files skipped with their
    reason, ranks assigned as the loader does, then :func:`combine`. A rank whose files no
    task summarised together (cycles the names did not group, one cycle picked by
    ``cycle``) is summarised again by ``remap(tasks)`` (default: in this process)."""
    from profkit.analyzers.analyze import RunHeader, combine
    from profkit.analyzers.thresholds import DEFAULT

    thresholds = thresholds or DEFAULT
    order = {str(f): i for i, f in enumerate(files)}
    records = sorted((r for res in results for r in res.records()),
                     key=lambda r: order.get(r.path, len(order)))
    notes: list[str] = []
    chosen = loader.choose_ranks(root, records, meta, skipped, notes, strict, ranks, cycle)
    made = {res.covers(): res for res in results if res.summary is not None}
    missing = [rf.paths for rf in chosen.values() if frozenset(rf.paths) not in made]
    folder = discover.run_folder(root)
    if missing:
        more = [task_for(folder, meta, paths, use_cache, thresholds, options)
                for paths in missing]
        for res in (remap or _in_process)(more):
            made.setdefault(res.covers(), res)
    summaries, sidecars = [], []
    for rank, rf in list(chosen.items()):
        res = made.get(frozenset(rf.paths))
        if res is None:
            skipped.append(SkippedFile(rf.paths[0], f"rank {rank}: its files could not be "
                                       "summarised together"))
            del chosen[rank]
            continue
        summary = res.summary if res.summary.rank == rank else res.summary.relabel(rank)
        summary.rank_source = rf.source
        summaries.append(summary)
        sidecars += res.sidecars
    run_meta = loader.complete_meta(meta, chosen, folder, skipped)
    notes += loader.problem_notes(run_meta, {r: rf.files[0].meta for r, rf in chosen.items()})
    skipped += sidecars  # the NVML chunks the map left out, as the loader lists them
    counters = load_ncu_counters(folder, skipped)
    header = RunHeader(str(root), run_meta, [s.as_dict() for s in skipped], notes, counters)
    analysis = combine(header, summaries, thresholds)
    if ranks is not None:  # ranks left out on purpose are not missing (analyzers/report/header.py)
        analysis.run["ranks_selected"] = sorted(set(ranks))
    return analysis


def _in_process(tasks: list[FileTask]) -> list[FileResult]:
    return [summarize_file(t) for t in tasks]


def _run_map(tasks: list[FileTask], scheduler, workers: int | None,
             progress: Callable[[int, int], None] | None) -> Iterator[FileResult]:
    done = 0
    for res in _executor(tasks, scheduler, workers):
        done += 1
        if progress:
            progress(done, len(tasks))
        yield res


def _executor(tasks: list[FileTask], scheduler, workers: int | None) -> Iterable[FileResult]:
    if scheduler is not None:
        return _dask_map(tasks, scheduler, workers)
    sizes = [sum(loader._json_bytes(Path(p)) for p in t.files) for t in tasks]
    wanted = workers or loader.memory_safe_workers(sizes, min(len(tasks), os.cpu_count() or 1))
    small = sum(sizes) < loader.PARALLEL_MIN_BYTES and len(tasks) < POOL_MIN_FILES
    if wanted <= 1 or len(tasks) <= 1 or (small and not workers):
        return map(summarize_file, tasks)
    return _pool_map(tasks, wanted)


def _pool_map(tasks: list[FileTask], workers: int) -> Iterator[FileResult]:
    """The map in a local process pool; Ctrl-C (or any exception) kills the workers at once
    and removes the cache temporaries they were writing (profkit.run.pool)."""
    preload()
    cached = [f for t in tasks if t.use_cache for f in t.files]
    readers = min(workers, len(tasks))  # one memory budget between them
    tasks = [replace(t, readers=readers) for t in tasks]
    with process_pool(workers, on_kill=lambda: cache.sweep_temporaries(cached)) as pool:
        with sigint_blocked():  # the workers start here: with SIGINT held back
            futures = {pool.submit(summarize_file, t): t for t in tasks}
        for fut in as_completed(futures):
            yield _outcome(fut, futures[fut])


def preload() -> None:
    """Import what every worker's map and this process's reduce import, before the workers
    are forked: once, shared, rather than once per worker (~0.1 CPU s each on 2 ranks)."""
    import profkit.analyzers.analyze  # noqa: F401  the reduce's, here after the map anyway
    import profkit.analyzers.summaries  # noqa: F401

    import profkit.run.counters  # noqa: F401


def _outcome(fut, task: FileTask) -> FileResult:
    try:
        return fut.result()
    except Exception as exc:  # a worker that died (killed for memory, ...) loses one rank
        if children.stop_signal() is not None:  # ended by the command's stop: no rank lost
            raise children.Stopped(children.stop_signal()) from exc
        return _failed(task, f"worker failed ({type(exc).__name__}: {exc})")


def _dask_map(tasks: list[FileTask], scheduler, workers: int | None) -> Iterator[FileResult]:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError as exc:
        raise UsageError("--scheduler needs Dask: pip install 'profkit[cluster]'") from exc
    if not log.isEnabledFor(logging.INFO):  # Dask logs every worker start and stop at INFO
        logging.getLogger("distributed").setLevel(logging.WARNING)
    own = cluster = None
    if isinstance(scheduler, Client):
        client = scheduler
    elif scheduler == "local":
        n_workers = workers or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1,
                               processes=True, dashboard_address=":0")
        client = own = Client(cluster)
        readers = min(n_workers, len(tasks))  # one machine's memory between them
        tasks = [replace(t, readers=readers) for t in tasks]
    else:
        try:
            timeout_s = float(os.environ.get(CONNECT_TIMEOUT_ENV, 30))
            client = own = Client(str(scheduler), timeout=f"{timeout_s}s")
        except OSError as exc:
            raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc
    try:
        futures = client.map(summarize_file, tasks, pure=False)
        by_key = {f.key: t for f, t in zip(futures, tasks)}
        for fut in dask_completed(futures):
            yield _outcome(fut, by_key[fut.key])
            fut.release()
    finally:
        if own is not None:
            own.close()
        if cluster is not None:
            cluster.close()
