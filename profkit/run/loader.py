"""``load_run``: a run directory, a folder of stock traces, or one trace file -> :class:`Run`.

Each trace is ingested independently (in parallel processes when there are several large
ones); a file that cannot be read is skipped with its reason and never stops the others.
Which files are which rank's (its profiler cycles together, strangers set aside) is decided
by :mod:`profkit.run.rankfiles`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.api.types import union_categoricals

from profkit import schema as S
from profkit.errors import NoTracesError, TraceError, UsageError, error_text
from profkit.model import TABLE_ATTRIBUTES, RankData, Run, SkippedFile, empty_frame
from profkit.run import cache, discover, rankfiles, runmeta
from profkit.run.counters import load_counters, with_nvml
from profkit.run.ncufiles import load_ncu_counters
from profkit.run.pool import process_pool, sigint_blocked
from profkit.run.rankfiles import RankFiles
from profkit.strings import with_python_strings
from profkit.textout import rank_ranges, ranks_text
from profkit.trace import ingest, tracefile
from profkit.trace.header import header_facts, metadata_names

log = logging.getLogger(__name__)
PARALLEL_MIN_BYTES = 16 << 20  # below this, process start-up costs more than it saves
# Peak memory of ingesting one trace, per byte of its JSON (measured ~2.4 on 306 MB files,
# see BENCHMARKS.md); used to run no more workers at once than the free memory can hold.
INGEST_BYTES_PER_JSON_BYTE = 2.5
GZIP_EXPANSION = 12  # typical JSON bytes per gzip byte of a Kineto trace
MERGED_OUTPUT = "a merged trace written by profkit merge, not one rank's trace"
MAX_LISTED = 20  # skipped files an error names one by one


def memory_safe_workers(sizes: list[int], wanted: int, free_bytes: int | None = None) -> int:
    """How many traces to ingest at once so that their peak memory fits in 70% of the
    free memory (at least one)."""
    if free_bytes is None:
        try:
            free_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            return wanted
    per_worker = INGEST_BYTES_PER_JSON_BYTE * max(sizes, default=0)
    if per_worker <= 0:
        return wanted
    return max(1, min(wanted, int(0.7 * free_bytes // per_worker)))


@dataclass
class Ingested:
    path: str
    tables: dict[str, pd.DataFrame] | None = None
    meta: dict[str, Any] | None = None
    error: str | None = None


def trace_meta(path: Path, trace: tracefile.Trace, metadata: list) -> dict[str, Any]:
    """The header facts of one trace that the model keeps (``metadata``: its 'M' events),
    validated; ``problems`` holds one line naming the file and what was repaired, if anything."""
    problems = trace.all_problems()
    meta = {"source": str(path), **header_facts(trace.header, problems),
            **metadata_names(metadata, problems), "raw_event_count": len(trace)}
    meta["problems"] = [problems.line(path)] if problems else []
    return meta


@with_python_strings
def ingest_file(path: str, use_cache: bool = True, readers: int = 1) -> Ingested:
    """Tables and header of one trace file; never raises for a bad file. ``readers``: the
    traces read at once (a pool's workers), which share one memory budget."""
    trace_path = Path(path)
    if use_cache:
        hit = cache.load(trace_path)
        if hit is not None:
            return _with_facts(Ingested(path, hit[0], hit[1]))
    try:
        trace = tracefile.load(trace_path, readers)
        if isinstance(trace.header.profkit, dict):  # merge's own mark (profkit.timeline.merge)
            return Ingested(path, error=MERGED_OUTPUT)
        tables, metadata = ingest.build_tables(trace)
        meta = trace_meta(trace_path, trace, metadata)
        empty = ingest.unusable_reason(tables["events"], len(trace), list(trace.all_problems()))
        if empty:  # named once, as a skipped file: there is no rank to read
            return Ingested(path, error=empty)
    except TraceError as exc:
        return Ingested(path, error=exc.problem)
    except MemoryError:
        return Ingested(path, error="out of memory while reading (try --ranks to load fewer)")
    except Exception as exc:  # a bug on one file must not lose the other ranks
        log.exception("%s: could not be read", path)
        return Ingested(path, error=f"could not be read ({type(exc).__name__}: {exc})")
    for line in meta["problems"]:
        log.warning("%s", line)
    if use_cache:
        cache.store(trace_path, tables, meta)
    return _with_facts(Ingested(path, tables, meta))


def _with_facts(res: Ingested) -> Ingested:
    """The evidence of where the trace comes from (its process, time span, steps) added to
    its meta, for telling a rank's files from a stranger's (profkit.run.rankfiles)."""
    res.meta = {**res.meta, **rankfiles.trace_facts(res.tables["events"], res.tables["steps"])}
    return res


def _ingest_all(files: list[Path], use_cache: bool, workers: int | None,
                progress: Callable[[int, int], None] | None) -> list[Ingested]:
    """Cache hits are read here (cheaper than shipping tables back from a worker); the
    misses are parsed in parallel processes when they are large enough to pay for them."""
    results: dict[int, Ingested] = {}
    done = 0

    def finish(i: int, res: Ingested) -> None:
        nonlocal done
        results[i] = res
        done += 1
        if progress:
            progress(done, len(files))

    misses = []
    for i, f in enumerate(files):
        hit = cache.load(f) if use_cache else None
        if hit is not None:
            finish(i, _with_facts(Ingested(str(f), hit[0], hit[1])))
        else:
            misses.append(i)
    sizes = [_json_bytes(files[i]) for i in misses]
    total_bytes = sum(sizes)
    workers = workers or memory_safe_workers(sizes, min(len(misses), os.cpu_count() or 1))
    if workers <= 1 or len(misses) <= 1 or total_bytes < PARALLEL_MIN_BYTES:
        for i in misses:
            finish(i, ingest_file(str(files[i]), use_cache))
    else:
        paths = [str(files[i]) for i in misses]
        swept = (lambda: cache.sweep_temporaries(paths)) if use_cache else None
        with process_pool(workers, on_kill=swept) as pool:
            with sigint_blocked():  # the workers start here: with SIGINT held back
                readers = min(workers, len(paths))  # one memory budget between them
                futures = [pool.submit(ingest_file, path, use_cache, readers) for path in paths]
            for i, fut in zip(misses, futures):  # (map would cancel them when stopped)
                finish(i, fut.result())
    return [results[i] for i in range(len(files))]


def _json_bytes(path: Path) -> int:
    size = path.stat().st_size
    return size * GZIP_EXPANSION if path.name.endswith(".gz") else size


def read_run_json(folder: Path) -> dict[str, Any]:
    """run.json's validated facts ({} without one); what was wrong with it is logged and
    kept as one line in ``problems``."""
    meta, problems = runmeta.read_run_meta(folder)
    if problems:
        line = problems.line(folder / discover.RUN_JSON)
        log.warning("%s", line)
        meta["problems"] = [line]
    return meta


def problem_notes(meta: dict[str, Any], rank_metas: dict[int, dict]) -> list[str]:
    """One note per file whose bad values were repaired or dropped while reading it, and
    one per rank whose capture lost files (``meta``: :func:`complete_meta`'s)."""
    lines = list(meta.get("problems") or [])
    for rank_meta in rank_metas.values():
        lines.extend(rank_meta.get("problems") or [])
    lines += [f"rank {r}: {why}" for r, why in (meta.get("capture_lost") or {}).items()]
    return lines


@with_python_strings
def load_run(path: str | Path, *, cache: bool = True, workers: int | None = None,
             strict: bool = False, ranks: list[int] | None = None, cycle: int | None = None,
             progress: Callable[[int, int], None] | None = None) -> Run:
    """Load a run. ``ranks`` keeps only those ranks; ``cycle`` reads only that profiler
    cycle of each rank (or that on-demand capture of a folder of captures); ``strict``
    raises on duplicate ranks or traces from different runs instead of skipping them with a
    note. Which files each rank was read from: ``run.meta["rank_files"]`` and the notes."""
    path, cycle = pick_capture(path, cycle)
    root, folder, meta, files, skipped = open_run(path)
    results = _ingest_all(files, cache, workers, progress)
    notes: list[str] = []
    chosen = choose_ranks(root, results, meta, skipped, notes, strict, ranks, cycle)
    del results
    datas = {}
    for rank, rf in chosen.items():
        datas[rank] = rank_data(rf.files, rank, rf.source)
        for res in rf.files:  # keep only the joined tables of a rank read from several files
            res.tables = None
    rank_metas = {r: d.meta for r, d in datas.items()}
    run_meta = complete_meta(meta, chosen, folder, skipped)
    run = Run(str(root), run_meta, datas, skipped, notes + problem_notes(run_meta, rank_metas))
    _attach_counters(run, folder)
    _attach_nccl(run, folder)
    run.ncu = load_ncu_counters(folder, run.skipped)
    for rank, data in run.ranks.items():
        align_clock(data, run.clock_offset_ns(rank))
    return run


def pick_capture(path: str | Path, cycle: int | None) -> tuple[Path, int | None]:
    """(path, cycle) to open. A folder holding only on-demand captures (``capture-{k}-*``,
    each a complete run directory of its own, taken at its own moment of the job) opens
    capture ``cycle``; without ``cycle`` that is a :class:`UsageError` listing them."""
    root = Path(path)
    found = discover.walk(root) if root.is_dir() else None
    if found is None or found.traces or not found.captures:
        return root, cycle
    by_number = {discover.capture_number(c): c for c in found.captures}
    listing = ", ".join(c.name for c in found.captures)
    if cycle is None:
        raise UsageError(
            f"{root} holds only on-demand captures, each a run of its own: {listing}. Read "
            f"one: profkit analyze {found.captures[-1]}, or pass --cycle K for capture-K-*")
    if cycle not in by_number:
        raise UsageError(f"{root}: no on-demand capture {cycle} (it holds {listing})")
    return by_number[cycle], None


def open_run(path: str | Path) -> tuple[Path, Path, dict[str, Any], list[Path], list[SkippedFile]]:
    """(root, folder, run.json facts, trace files, other files skipped) of a run path;
    raises when there is nothing to read."""
    root = Path(path)
    if not root.exists():
        raise UsageError(f"{root}: no such file or folder")
    if not (root.is_dir() or root.is_file()):
        raise UsageError(f"{root}: {discover.not_a_file_reason(root, root.stat())}")
    folder = discover.run_folder(root)
    meta = read_run_json(folder) if root.is_dir() else {}
    files, skipped = discover.find_trace_files(root)
    if not files:
        lost = "".join(f"; rank {r}: {why}" for r, why in runmeta.capture_losses(folder).items())
        unfinished = runmeta.unfinished_capture(folder, meta) if root.is_dir() else ""
        lost += f"; {unfinished}" if unfinished else ""
        raise NoTracesError(f"{root}: no trace files (.json or .json.gz) found{lost}"
                            f"{discover.listing(skipped)}")
    return root, folder, meta, files, skipped


def choose_ranks(root: Path, results: list, meta: dict, skipped: list[SkippedFile],
                 notes: list[str], strict: bool, ranks: list[int] | None,
                 cycle: int | None = None) -> dict[int, RankFiles]:
    """{rank: its files} for the results in file order (anything with ``path``, ``meta``
    and ``error``): unreadable files, foreign traces and duplicates skipped, each rank's
    profiler cycles kept together (see :mod:`profkit.run.rankfiles`), unranked files numbered,
    only ``ranks`` and profiler cycle ``cycle`` kept when given; raises when no rank is
    left, or when the files claiming a rank cannot be told apart."""
    good = []
    for res in results:
        if res.error:
            skipped.append(SkippedFile(res.path, res.error))
        else:
            good.append(res)
    wanted = None if ranks is None else set(ranks)
    chosen = rankfiles.assign(good, meta, skipped, notes, strict, wanted)
    if wanted is not None:
        chosen = _wanted_ranks(root, chosen, wanted, notes)
    if chosen and cycle is not None:
        chosen = rankfiles.select_cycle(chosen, cycle, notes)
        if not chosen:
            raise NoTracesError(f"{root}: no rank has profiler cycle {cycle} ({notes[-1]})")
    notes.extend(rankfiles.cycle_notes(chosen, cycle))
    if not chosen:
        detail = discover.named(skipped, MAX_LISTED) or "nothing readable"
        raise NoTracesError(f"{root}: no readable trace ({detail})")
    return chosen


def _wanted_ranks(root: Path, chosen: dict[int, RankFiles], wanted: set[int],
                  notes: list[str]) -> dict[int, RankFiles]:
    """The ranks of ``chosen`` that ``--ranks`` asked for; a :class:`UsageError` naming the
    ranks the run has when none of them is there, a note naming those that are not."""
    kept = {r: c for r, c in chosen.items() if r in wanted}
    absent = sorted(wanted - set(chosen))
    has = f"it has traces of {ranks_text(chosen)}" if chosen else "it has no readable trace"
    if not kept and chosen:
        raise UsageError(f"--ranks {rank_ranges(wanted)}: {root} has no trace of "
                         f"{ranks_text(absent)}; {has}")
    if absent and kept:
        notes.append(f"--ranks: no trace of {ranks_text(absent)} in this run ({has})")
    return kept


def rank_data(files: list[Ingested] | Ingested, rank: int, source: str) -> RankData:
    """One rank's data: its trace's tables, or those of its profiler cycles joined in time
    order (ProfilerStep numbers kept, shifted only where cycles repeat them:
    :func:`profkit.run.rankfiles.step_offsets`). ``meta["sources"]``: the files, in order."""
    files = files if isinstance(files, list) else [files]
    first = files[0]
    meta = {**first.meta, "sources": [f.path for f in files]}
    if len(files) == 1:
        tables = dict(first.tables)
    else:
        offsets = rankfiles.step_offsets([f.meta for f in files])
        tables = {t.name: join_frames([shift_steps(f.tables[t.name], off, t.step_column)
                                       for f, off in zip(files, offsets)])
                  for t in S.RANK_TABLES if t.cached}
        spans = [f.meta["span_ns"] for f in files if f.meta.get("span_ns")]
        meta["span_ns"] = [spans[0][0], max(s[1] for s in spans)] if spans else None
        numbers = tables["steps"][S.STEP]
        meta["step_range"] = [int(numbers.min()), int(numbers.max())] if len(numbers) else None
    for t in S.RANK_TABLES:  # tables built after ingest (not cached) start empty
        tables.setdefault(t.name, empty_frame(t.columns))
    own = {name: tables.pop(name) for name in TABLE_ATTRIBUTES}
    return RankData(rank, first.path, **own, meta=meta, rank_source=source, more=tables)


def shift_steps(frame: pd.DataFrame, offset: int, column: str | None = S.STEP) -> pd.DataFrame:
    """``frame`` with its step numbers (those >= 0 in ``column``; None: it has none) moved
    up by ``offset``."""
    if not offset or column is None:
        return frame
    out = frame.copy()
    out[column] = out[column].where(out[column] < 0, out[column] + offset)
    return out


def join_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Tables of one rank's cycles as one, sorted by start time; a categorical column stays
    categorical (the union of the cycles' categories)."""
    out = pd.concat(frames, ignore_index=True)
    for col in frames[0].columns:
        lost = not isinstance(out[col].dtype, pd.CategoricalDtype)
        if lost and all(isinstance(f[col].dtype, pd.CategoricalDtype) for f in frames):
            out[col] = union_categoricals([f[col] for f in frames])
    return out.sort_values(S.TS_NS, kind="stable").reset_index(drop=True)


def complete_meta(meta: dict, chosen: dict[int, RankFiles], folder: Path,
                  skipped: list[SkippedFile] | None = None) -> dict[str, Any]:
    """run.json's facts, completed from the traces; a run is failed if any rank says so.
    ``rank_files``: the files each rank was read from; bad rank status files are listed in
    ``skipped``."""
    rank_metas = {r: rf.files[0].meta for r, rf in chosen.items()}
    out = dict(meta, rank_files={str(r): rf.paths for r, rf in chosen.items()})
    status = runmeta.read_rank_status(folder, skipped) if meta else {}
    if status:
        out["rank_status"] = {str(r): s.get("status") for r, s in status.items()}
        failed = {r: s for r, s in status.items() if s.get("status") == "failed"}
        if failed:
            out["status"] = "failed"
            out.setdefault("failed_ranks", sorted(failed))
            # why each rank failed, for the report's status line (the caller's reasons win)
            out["rank_errors"] = {**{str(r): error_text(s.get("error"))
                                     for r, s in sorted(failed.items())},
                                  **(meta.get("rank_errors") or {})}
        lost = {str(r): runmeta.capture_loss(s) for r, s in sorted(status.items())}
        if any(lost.values()):  # what a failed write cost (a full disk during the job)
            out["capture_lost"] = {r: why for r, why in lost.items() if why}
        stops = {str(r): runmeta.capture_stop(s) for r, s in sorted(status.items())}
        stops = {r: why for r, why in stops.items() if why}
        if stops and out.get("status") != "failed":  # the job went on, its capture did not
            out["status"] = "incomplete"
            out["rank_errors"] = {**stops, **(out.get("rank_errors") or {})}
    if not out.get("world_size"):
        sizes = [m.get("distributed", {}).get("world_size") for m in rank_metas.values()]
        sizes = [s for s in sizes if isinstance(s, int)]
        out["world_size"] = max(sizes) if sizes else max(rank_metas) + 1
    if not out.get("hosts"):
        out["hosts"] = sorted({m.get("host") for m in rank_metas.values() if m.get("host")})
    return out


def _attach_counters(run: Run, folder: Path) -> None:
    """Each rank's NVML samples, beside its trace's own counter samples."""
    for rank, data in run.ranks.items():
        data.counters = with_nvml(data.counters, load_counters(folder, rank, run.skipped))


def _attach_nccl(run: Run, folder: Path) -> None:
    """NCCL logs and flight-recorder dumps of a profkit run, as tables; a bad file is
    listed in ``run.skipped`` and never blocks the traces."""
    if not (folder / "nccl").is_dir():
        return
    from profkit.nccl.logs import load_nccl_dir

    run.nccl = load_nccl_dir(folder, run.skipped, run.meta.get("ranks") or {})


def align_clock(data: RankData, offset: int) -> None:
    """Shift one rank onto rank 0's clock by the offset run.json measured for it (ns): every
    time column of every table of ``schema.RANK_TABLES`` (an optional one where it is set)."""
    if not offset:
        return
    for t in S.RANK_TABLES:
        frame = data.table(t.name)
        for col in t.time_columns:
            if col in t.optional_times:
                frame[col] = frame[col].where(frame[col] < 0, frame[col] - offset)
            else:
                frame[col] -= offset
