"""``analyze_run``: map every trace file to a rank summary, then reduce them to the analysis.

The map (:func:`summarize_file`: read one trace, align its clock, attach its NVML samples,
:func:`~profkit.analyzers.summaries.summarize_rank`) runs where the executor puts it:

- in this process (one file, or small runs where starting workers costs more than it saves);
- a local process pool (the default for larger runs), its size limited by free memory;
- a Dask cluster (``scheduler``: an address such as ``tcp://host:8786``, ``"local"`` for a
  ``LocalCluster`` on this machine, or a ``dask.distributed.Client``). Workers read the
  traces by path, so the run must be on storage every worker sees under the same path,
  and they need profkit installed (``pip install 'profkit[cluster]'``).

Only summaries travel back. The reduce (:func:`~profkit.analyzers.analyze.combine`) is the
same code for every executor, so their reports are identical. A file that cannot be read,
or whose map fails, is skipped with its reason and never stops the other ranks.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profkit import datacodec, discover, loader
from profkit.errors import UsageError
from profkit.model import SkippedFile, clock_offset_ns

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_ENV = "PROFKIT_DASK_TIMEOUT_S"  # seconds to reach a scheduler (default 30)
POOL_MIN_FILES = 8  # below this many files (and PARALLEL_MIN_BYTES), work in this process


@dataclass
class FileTask:
    """One trace file to summarise, with the few run facts the map needs."""

    path: str
    folder: str  # the run's folder (NVML samples of a profkit run directory)
    run_meta: dict[str, Any]  # run.json's gpus (of the file's host) and clock offsets
    use_cache: bool = True
    thresholds: Any = None


@datacodec.register
@dataclass
class FileResult:
    """What the map returns for one file: its header facts and summary, or its error."""

    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    summary: Any = None
    error: str | None = None


def summarize_file(task: FileTask) -> FileResult:
    """The map: one trace file -> its rank's summary. Never raises for a bad file."""
    from profkit.analyzers.summaries import summarize_rank
    from profkit.analyzers.thresholds import DEFAULT

    from profkit.counters import load_counters

    try:
        res = loader.ingest_file(task.path, task.use_cache)
        if res.error:
            return FileResult(task.path, error=res.error)
        rank, source = loader.rank_of(res)
        data = loader.rank_data(res, 0 if rank is None else rank, source or "file order")
        del res
        if rank is not None:
            data.counters = load_counters(Path(task.folder), rank)
        loader.align_clock(data, clock_offset_ns(task.run_meta, data.rank))
        summary = summarize_rank(data, task.run_meta, task.thresholds or DEFAULT)
        return FileResult(task.path, summary.meta, summary)  # trimmed header facts
    except MemoryError:
        return FileResult(task.path, error="out of memory while analysing this rank")
    except Exception as exc:  # a bug on one rank must not lose the others
        log.exception("%s: analysis failed", task.path)
        return FileResult(task.path, error=f"analysis failed ({type(exc).__name__}: {exc})")


def plan_tasks(folder: Path, meta: dict[str, Any], files: list[Path], use_cache: bool,
               thresholds) -> list[FileTask]:
    """One task per file, each carrying only its host's GPUs (when the file name gives its
    rank) so that a thousand tasks do not each carry the whole run.json."""
    gpus = [g for g in meta.get("gpus") or [] if isinstance(g, dict)]
    declared = meta.get("ranks") if isinstance(meta.get("ranks"), dict) else {}
    offsets = meta.get("clock_offsets_ns") or {}
    tasks = []
    for path in files:
        rank = discover.rank_from_name(path)
        host = (declared.get(str(rank)) or {}).get("host") if rank is not None else None
        mine = [g for g in gpus if g.get("host") in (None, host)] if host else gpus
        tasks.append(FileTask(str(path), str(folder), {"gpus": mine, "clock_offsets_ns": offsets},
                              use_cache, thresholds))
    return tasks


def analyze_run(path: str | Path, *, scheduler: Any = None, workers: int | None = None,
                cache: bool = True, strict: bool = False, ranks: list[int] | None = None,
                thresholds=None, progress: Callable[[int, int], None] | None = None):
    """Analyze the run at ``path`` by map (per file) and reduce (see module doc)."""
    from profkit.analyzers.thresholds import DEFAULT

    thresholds = thresholds or DEFAULT
    root, folder, meta, files, skipped = loader.open_run(path)
    tasks = plan_tasks(folder, meta, files, cache, thresholds)
    results = list(_run_map(tasks, scheduler, workers, progress))
    return reduce_results(root, meta, files, skipped, results, strict=strict, ranks=ranks,
                          thresholds=thresholds)


def reduce_results(root: Path, meta: dict[str, Any], files: list[Path],
                   skipped: list[SkippedFile], results: list[FileResult], *,
                   strict: bool = False, ranks: list[int] | None = None, thresholds=None):
    """The analysis from the map's results (any order): unreadable files skipped with their
    reason, ranks assigned as the loader does, then :func:`combine`."""
    from profkit.analyzers.analyze import RunHeader, combine
    from profkit.analyzers.thresholds import DEFAULT

    order = {str(f): i for i, f in enumerate(files)}
    results = sorted(results, key=lambda r: order.get(r.path, len(order)))
    notes: list[str] = []
    chosen = loader.choose_ranks(root, results, meta, skipped, notes, strict, ranks)
    summaries = []
    for rank, (res, source) in chosen.items():
        summary = res.summary if res.summary.rank == rank else res.summary.relabel(rank)
        summary.rank_source = source
        summaries.append(summary)
    rank_metas = {r: res.meta for r, (res, _) in chosen.items()}
    run_meta = loader.complete_meta(meta, rank_metas, discover.run_folder(root), skipped)
    notes += loader.problem_notes(meta, rank_metas)
    header = RunHeader(str(root), run_meta, [s.as_dict() for s in skipped], notes)
    return combine(header, summaries, thresholds or DEFAULT)


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
    sizes = [loader._json_bytes(Path(t.path)) for t in tasks]
    wanted = workers or loader.memory_safe_workers(sizes, min(len(tasks), os.cpu_count() or 1))
    small = sum(sizes) < loader.PARALLEL_MIN_BYTES and len(tasks) < POOL_MIN_FILES
    if wanted <= 1 or len(tasks) <= 1 or (small and not workers):
        return map(summarize_file, tasks)
    return _pool_map(tasks, wanted)


def _pool_map(tasks: list[FileTask], workers: int) -> Iterator[FileResult]:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(summarize_file, t): t for t in tasks}
        for fut in as_completed(futures):
            yield _outcome(fut, futures[fut])


def _outcome(fut, task: FileTask) -> FileResult:
    try:
        return fut.result()
    except Exception as exc:  # a worker that died (killed for memory, ...) loses one file
        return FileResult(task.path, error=f"worker failed ({type(exc).__name__}: {exc})")


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
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=":0")
        client = own = Client(cluster)
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
