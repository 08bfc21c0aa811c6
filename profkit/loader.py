"""``load_run``: a run directory, a folder of stock traces, or one trace file -> :class:`Run`.

Each trace is ingested independently (in parallel processes when there are several large
ones); a file that cannot be read is skipped with its reason and never stops the others.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from profkit import cache, discover, ingest, runmeta, tracefile
from profkit.counters import load_counters
from profkit.errors import NoTracesError, RunConflictError, TraceError, UsageError
from profkit.header import header_facts, process_names
from profkit.model import RankData, Run, SkippedFile

log = logging.getLogger(__name__)
PARALLEL_MIN_BYTES = 16 << 20  # below this, process start-up costs more than it saves
# Peak memory of ingesting one trace, per byte of its JSON (measured ~2.4 on 306 MB files,
# see BENCHMARKS.md); used to run no more workers at once than the free memory can hold.
INGEST_BYTES_PER_JSON_BYTE = 2.5
GZIP_EXPANSION = 12  # typical JSON bytes per gzip byte of a Kineto trace


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
            "process_names": process_names(metadata, problems), "raw_event_count": len(trace)}
    meta["problems"] = [problems.line(path)] if problems else []
    return meta


def ingest_file(path: str, use_cache: bool = True) -> Ingested:
    """Tables and header of one trace file; never raises for a bad file."""
    trace_path = Path(path)
    if use_cache:
        hit = cache.load(trace_path)
        if hit is not None:
            return Ingested(path, hit[0], hit[1])
    try:
        trace = tracefile.load(trace_path)
        events, collectives, steps, metadata = ingest.build_tables(trace)
        meta = trace_meta(trace_path, trace, metadata)
    except TraceError as exc:
        return Ingested(path, error=exc.problem)
    except MemoryError:
        return Ingested(path, error="out of memory while reading (try --ranks to load fewer)")
    except Exception as exc:  # a bug on one file must not lose the other ranks
        log.exception("%s: could not be read", path)
        return Ingested(path, error=f"could not be read ({type(exc).__name__}: {exc})")
    for line in meta["problems"]:
        log.warning("%s", line)
    tables = {"events": events, "collectives": collectives, "steps": steps}
    if use_cache:
        cache.store(trace_path, tables, meta)
    return Ingested(path, tables, meta)


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
            finish(i, Ingested(str(f), hit[0], hit[1]))
        else:
            misses.append(i)
    sizes = [_json_bytes(files[i]) for i in misses]
    total_bytes = sum(sizes)
    workers = workers or memory_safe_workers(sizes, min(len(misses), os.cpu_count() or 1))
    if workers <= 1 or len(misses) <= 1 or total_bytes < PARALLEL_MIN_BYTES:
        for i in misses:
            finish(i, ingest_file(str(files[i]), use_cache))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            paths = [str(files[i]) for i in misses]
            for i, res in zip(misses, pool.map(ingest_file, paths, [use_cache] * len(paths))):
                finish(i, res)
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
    """One note per file whose bad values were repaired or dropped while reading it."""
    lines = list(meta.get("problems") or [])
    for rank_meta in rank_metas.values():
        lines.extend(rank_meta.get("problems") or [])
    return lines


def load_run(path: str | Path, *, cache: bool = True, workers: int | None = None,
             strict: bool = False, ranks: list[int] | None = None,
             progress: Callable[[int, int], None] | None = None) -> Run:
    """Load a run. ``ranks`` keeps only those ranks; ``strict`` raises on duplicate ranks or
    traces from different runs instead of skipping them with a note."""
    root, folder, meta, files, skipped = open_run(path)
    results = _ingest_all(files, cache, workers, progress)
    notes: list[str] = []
    chosen = choose_ranks(root, results, meta, skipped, notes, strict, ranks)
    datas = {r: rank_data(res, r, source) for r, (res, source) in chosen.items()}
    rank_metas = {r: d.meta for r, d in datas.items()}
    run_meta = complete_meta(meta, rank_metas, folder, skipped)
    run = Run(str(root), run_meta, datas, skipped, notes + problem_notes(meta, rank_metas))
    _attach_counters(run, folder)
    _attach_nccl(run, folder)
    for rank, data in run.ranks.items():
        align_clock(data, run.clock_offset_ns(rank))
    return run


def open_run(path: str | Path) -> tuple[Path, Path, dict[str, Any], list[Path], list[SkippedFile]]:
    """(root, folder, run.json facts, trace files, other files skipped) of a run path;
    raises when there is nothing to read."""
    root = Path(path)
    if not root.exists():
        raise UsageError(f"{root}: no such file or folder")
    folder = discover.run_folder(root)
    meta = read_run_json(folder) if root.is_dir() else {}
    files, skipped = discover.find_trace_files(root)
    if not files:
        raise NoTracesError(f"{root}: no trace files (.json or .json.gz) found")
    return root, folder, meta, files, skipped


def choose_ranks(root: Path, results: list, meta: dict, skipped: list[SkippedFile],
                 notes: list[str], strict: bool, ranks: list[int] | None) -> dict[int, tuple]:
    """{rank: (result, rank source)} for the results in file order (anything with ``path``,
    ``meta`` and ``error``): unreadable files, foreign traces and duplicate ranks skipped,
    unranked files numbered, only ``ranks`` kept when given; raises when no rank is left."""
    good = []
    for res in results:
        if res.error:
            skipped.append(SkippedFile(res.path, res.error))
        else:
            good.append(res)
    chosen = _assign_ranks(good, meta, skipped, notes, strict)
    if ranks is not None:
        chosen = {r: c for r, c in chosen.items() if r in set(ranks)}
    if not chosen:
        detail = "; ".join(f"{s.path}: {s.reason}" for s in skipped) or "nothing readable"
        raise NoTracesError(f"{root}: no readable trace ({detail})")
    return chosen


def _assign_ranks(results: list, meta: dict, skipped: list[SkippedFile],
                  notes: list[str], strict: bool) -> dict[int, tuple]:
    results = _drop_foreign(results, meta, skipped, notes, strict)
    chosen: dict[int, tuple] = {}
    unranked: list = []
    for res in results:
        rank, source = rank_of(res)
        if rank is None:
            unranked.append(res)
            continue
        if rank in chosen:
            msg = f"duplicate rank {rank} (already read from {chosen[rank][0].path})"
            if strict:
                raise RunConflictError(f"{res.path}: {msg}")
            skipped.append(SkippedFile(res.path, msg))
            continue
        chosen[rank] = (res, source)
    for res in unranked:
        rank = next(r for r in range(len(chosen) + len(unranked) + 1) if r not in chosen)
        notes.append(f"{res.path}: no rank in the trace or its name; using rank {rank} by file order")
        log.info(notes[-1])
        chosen[rank] = (res, "file order")
    return dict(sorted(chosen.items()))


def rank_of(res: Ingested) -> tuple[int | None, str]:
    rank = res.meta.get("distributed", {}).get("rank")
    if isinstance(rank, int) and rank >= 0:
        return rank, "distributedInfo"
    rank = discover.rank_from_name(res.path)
    return (rank, "file name") if rank is not None else (None, "")


def rank_data(res: Ingested, rank: int, source: str) -> RankData:
    t = res.tables
    return RankData(rank, res.path, t["events"], t["collectives"], t["steps"],
                    meta=res.meta, rank_source=source)


def _drop_foreign(results: list[Ingested], meta: dict, skipped: list[SkippedFile],
                  notes: list[str], strict: bool) -> list[Ingested]:
    """Skip traces that cannot belong to the same run as the majority: another profkit
    run id, or another world size."""
    def world(res: Ingested):
        return res.meta.get("distributed", {}).get("world_size")

    run_id = meta.get("run_id")
    sizes = Counter(w for w in map(world, results) if isinstance(w, int))
    expected = meta.get("world_size") or (sizes.most_common(1)[0][0] if sizes else None)
    kept = []
    for res in results:
        theirs = res.meta.get("profkit_run_id")
        reason = None
        if run_id and theirs and theirs != run_id:
            reason = f"from another run (run id {theirs}, this run is {run_id})"
        elif expected and isinstance(world(res), int) and world(res) != expected:
            reason = f"from another run (world size {world(res)}, the run has {expected})"
        if reason is None:
            kept.append(res)
        elif strict:
            raise RunConflictError(f"{res.path}: {reason}")
        else:
            skipped.append(SkippedFile(res.path, reason))
            notes.append(f"{res.path}: skipped, {reason}")
    return kept


def read_rank_status(folder: Path, skipped: list[SkippedFile] | None = None) -> dict[int, dict]:
    """Each rank's own final status (``ranks/rank{R}.json``) in a profkit run directory; a
    bad file is logged and listed in ``skipped``."""
    out = {}
    for path in sorted((folder / runmeta.RANK_STATUS_DIR).glob("rank*.json")):
        try:
            status = runmeta.read_rank_status_file(path)
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable rank status skipped (%s)", path, exc)
            if skipped is not None:
                skipped.append(SkippedFile(str(path), f"unreadable rank status ({exc})"))
            continue
        out[status["rank"]] = status
    return out


def complete_meta(meta: dict, rank_metas: dict[int, dict], folder: Path,
                  skipped: list[SkippedFile] | None = None) -> dict[str, Any]:
    """run.json's facts, completed from the traces; a run is failed if any rank says so
    (bad rank status files are listed in ``skipped``)."""
    out = dict(meta)
    status = read_rank_status(folder, skipped) if meta else {}
    if status:
        out["rank_status"] = {str(r): s.get("status") for r, s in status.items()}
        failed = {r: s for r, s in status.items() if s.get("status") == "failed"}
        if failed:
            out["status"] = "failed"
            out.setdefault("failed_ranks", sorted(failed))
    if not out.get("world_size"):
        sizes = [m.get("distributed", {}).get("world_size") for m in rank_metas.values()]
        sizes = [s for s in sizes if isinstance(s, int)]
        out["world_size"] = max(sizes) if sizes else max(rank_metas) + 1
    if not out.get("hosts"):
        out["hosts"] = sorted({m.get("host") for m in rank_metas.values() if m.get("host")})
    return out


def _attach_counters(run: Run, folder: Path) -> None:
    for rank, data in run.ranks.items():
        data.counters = load_counters(folder, rank, run.skipped)


def _attach_nccl(run: Run, folder: Path) -> None:
    """NCCL logs and flight-recorder dumps of a profkit run, as tables; a bad file is
    listed in ``run.skipped`` and never blocks the traces."""
    if not (folder / "nccl").is_dir():
        return
    from profkit.nccl_logs import load_nccl_dir

    run.nccl = load_nccl_dir(folder, run.skipped, run.meta.get("ranks") or {})


def align_clock(data: RankData, offset: int) -> None:
    """Shift one rank onto rank 0's clock by the offset run.json measured for it (ns)."""
    from profkit import schema as S

    if not offset:
        return
    data.events[S.TS_NS] -= offset
    data.steps[S.TS_NS] -= offset
    for col in (S.GPU_START_NS, S.GPU_END_NS):
        data.steps[col] = data.steps[col].where(data.steps[col] < 0, data.steps[col] - offset)
    data.counters[S.TS_NS] -= offset
    data.collectives[S.TS_NS] -= offset
    cpu = data.collectives[S.CPU_TS_NS]
    data.collectives[S.CPU_TS_NS] = cpu.where(cpu < 0, cpu - offset)
