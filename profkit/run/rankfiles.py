"""Which trace files are which rank's: the rank each trace claims, checked against evidence.

A trace claims a rank by its ``distributedInfo``, else by its file name, else it is numbered
by file order. Files that cannot be this run's are set aside first: another profkit run id,
another world size, or, in a profkit run directory, another process than the one run.json
records for the rank (its host and pid against the trace's host and the pid of its CPU
events). When several files still claim one rank, the evidence decides, strongest first:

1. a copy: the same Kineto trace id, or the same process over the same time span, as a
   file already read; read once.
2. cycles: files of one process whose ProfilerStep numbers (else time spans) follow each
   other are that rank's profiler cycles (``repeat``), all read, in time order.
3. time: of several processes, the one whose events overlap the other ranks' time.
4. name: in a profkit run directory, the files named as profkit names them
   (``rank{R}.pt.trace.json.gz``, ``rank{R}.cycle{K}.pt.trace.json.gz``).

Anything left undecided is a :class:`RunConflictError` naming the files and what to do: the
loader never guesses between a rank's trace and a stranger. The functions take any records
with ``path``, ``meta`` and ``error`` (the loader's ingested files, the map's results).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.errors import RunConflictError
from profkit.model import SkippedFile
from profkit.run import discover
from profkit.textout import rank_ranges, ranks_text  # noqa: F401  (rank_ranges: kept importable from here)

log = logging.getLogger(__name__)
# Event kinds recorded by the profiled process itself (GPU events use the device as pid).
PROCESS_KINDS = (S.KIND_CPU_OP, S.KIND_ANNOTATION, S.KIND_RUNTIME, S.KIND_DRIVER, S.KIND_PYTHON)


@dataclass
class RankFiles:
    """The files one rank is read from, in time order, and how its number was known."""

    files: list
    source: str
    cycles: list[int]  # each file's cycle: from profkit's name, else its place in time

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]


def trace_facts(events: pd.DataFrame, steps: pd.DataFrame) -> dict[str, Any]:
    """Evidence of where a trace comes from: ``pid`` (the process its CPU events were
    recorded in), ``span_ns`` ([first event start, last event end], the trace's own clock)
    and ``step_range`` ([first, last] ProfilerStep number); None where the trace lacks it."""
    kinds = events[S.KIND].cat
    wanted = np.append(np.isin(kinds.categories, PROCESS_KINDS), False)  # code -1: no kind
    pids = events[S.PID].to_numpy()[wanted[kinds.codes.to_numpy()]]
    values, counts = np.unique(pids[pids > 0], return_counts=True)
    ts = events[S.TS_NS].to_numpy()
    return {"pid": int(values[counts.argmax()]) if len(values) else None,
            "span_ns": [int(ts.min()), int((ts + events[S.DUR_NS].to_numpy()).max())]
            if len(ts) else None,
            "step_range": [int(steps[S.STEP].min()), int(steps[S.STEP].max())]
            if len(steps) else None}


def rank_of(rec) -> tuple[int | None, str]:
    rank = (rec.meta.get("distributed") or {}).get("rank")
    if isinstance(rank, int) and rank >= 0:
        return rank, "distributedInfo"
    rank = discover.rank_from_name(rec.path)
    return (rank, "file name") if rank is not None else (None, "")


def assign(records: list, meta: dict, skipped: list[SkippedFile], notes: list[str],
           strict: bool, wanted: set[int] | None = None) -> dict[int, RankFiles]:
    """{rank: RankFiles} for readable records in file order (see module doc). ``wanted``:
    only these ranks matter (conflicts elsewhere are not errors)."""
    judge = _Judge(meta, skipped, strict, notes)
    claims: dict[int, list] = {}
    unranked: list = []
    for rec in judge.drop_foreign(records):
        rank, _ = rank_of(rec)
        if rank is None:
            unranked.append(rec)
        elif judge.same_process(rec, rank):
            claims.setdefault(rank, []).append(rec)
    claims = {r: judge.drop_copies(r, recs) for r, recs in claims.items()}
    peers = [f.meta.get("span_ns") for recs in claims.values() if len(recs) == 1 for f in recs]
    chosen = {}
    for rank, recs in claims.items():
        if wanted is None or rank in wanted or len(recs) == 1:
            files = recs if len(recs) == 1 else judge.decide(rank, recs, peers)
            chosen[rank] = RankFiles(files, rank_of(files[0])[1], cycle_numbers(files))
    for group in _cycle_groups(unranked):
        rank = next(r for r in range(len(chosen) + len(unranked) + 1) if r not in claims | chosen)
        notes.append(f"{group[0].path}: no rank in the trace or its name; using rank {rank} "
                     "by file order")
        log.info(notes[-1])
        chosen[rank] = RankFiles(group, "file order", cycle_numbers(group))
    return dict(sorted(chosen.items()))


class _Judge:
    """The run's facts, and the list its decisions to skip a file go to."""

    def __init__(self, meta: dict, skipped: list[SkippedFile], strict: bool,
                 notes: list[str] | None = None):
        self.meta, self.skipped, self.strict = meta, skipped, strict
        self.notes = notes if notes is not None else []
        declared = meta.get("ranks")
        self.declared = declared if isinstance(declared, dict) else {}

    def skip(self, rec, reason: str) -> None:
        if self.strict:
            raise RunConflictError(f"{rec.path}: {reason}")
        self.skipped.append(SkippedFile(rec.path, reason))

    def drop_foreign(self, records: list) -> list:
        """Records that can belong to this run: not another profkit run id, not another
        world size than the run's (:meth:`run_world`)."""
        run_id = self.meta.get("run_id")
        expected = self.run_world(records)
        kept = []
        for rec in records:
            theirs = rec.meta.get("profkit_run_id")
            if run_id and theirs and theirs != run_id:
                self.skip(rec, f"from another run (run id {theirs}, this run is {run_id})")
            elif expected and _world(rec) is not None and _world(rec) != expected:
                self.skip(rec, f"from another run (world size {_world(rec)}, the run has "
                          f"{expected})")
            else:
                kept.append(rec)
        return kept

    def run_world(self, records: list) -> int | None:
        """The run's world size: run.json's when a trace agrees with it (or none says);
        else the traces' own, by :func:`world_evidence`: the world of the most ranks, then
        the most complete one. When the traces overrule run.json, run.json's facts say so
        from then on (``world_size``) and a note says why."""
        declared = self.meta.get("world_size")
        sizes = {w for w in map(_world, records) if w is not None}
        if not sizes or declared in sizes:
            return declared
        evidence = world_evidence(records)
        best = max(sizes, key=evidence.__getitem__)  # a tie: the first in file order
        if declared:
            agree = sum(_world(r) == best for r in records)
            self.notes.append(f"run.json says world size {declared}, but no trace does: read as "
                              f"the traces' world size {best} ({agree} trace(s) say so)")
            log.warning("%s", self.notes[-1])
            self.meta["world_size"] = best
        return best

    def same_process(self, rec, rank: int) -> bool:
        """False (and the file skipped) when run.json records rank ``rank`` on another host
        or as another process than the one the trace was recorded in."""
        want = self.declared.get(str(rank))
        theirs = rec.meta.get("profkit_run_id")
        if not isinstance(want, dict) or (theirs and theirs == self.meta.get("run_id")):
            return True
        host, want_host = rec.meta.get("host"), want.get("host")
        pid, want_pid = rec.meta.get("pid"), want.get("pid")
        if isinstance(host, str) and isinstance(want_host, str) and _short(host) != _short(want_host):
            reason = f"recorded on host {host}"
        elif isinstance(pid, int) and isinstance(want_pid, int) and pid != want_pid:
            reason = f"recorded by process {pid}"
        else:
            return True
        self.skip(rec, f"not this run's rank {rank}: {reason}, and run.json has rank {rank} as "
                  f"process {want_pid} on {want_host}")
        return False

    def drop_copies(self, rank: int, recs: list) -> list:
        kept: list = []
        for rec in recs:
            twin = next((k for k in kept if _is_copy(k.meta, rec.meta)), None)
            if twin is None:
                kept.append(rec)
            else:
                self.skip(rec, f"duplicate rank {rank}: a copy of {twin.path} (the same capture)")
        return kept

    def decide(self, rank: int, recs: list, peers: list) -> list:
        """The files rank ``rank`` is read from, of several claiming it (module doc)."""
        groups = _by_process(recs)
        ordered = [as_cycles(g) for g in groups]
        pick = 0 if len(groups) == 1 else _overlapping(groups, peers)
        why = "its events do not overlap the other ranks' time, unlike those of"
        if pick is None and self.meta.get("run_id"):
            pick, why = _profkit_named(rank, groups), "not profkit's name for it, unlike"
        if pick is None or ordered[pick] is None:
            raise RunConflictError(_conflict(rank, recs))
        for i, group in enumerate(groups):
            for rec in group if i != pick else []:
                self.skip(rec, f"duplicate rank {rank}: {why} {ordered[pick][0].path}")
        return ordered[pick]


def _world(rec) -> int | None:
    world = (rec.meta.get("distributed") or {}).get("world_size")
    return world if isinstance(world, int) and world > 0 else None


def world_evidence(records: list) -> dict[int, tuple[int, float]]:
    """Per world size the traces claim: (distinct ranks claimed by traces of that world,
    share of its ranks present, counting traces that name no world size). A complete
    2-rank run beats one trace claiming rank 34 of 300; eight ranks of a 300-rank job beat
    one trace of another 2-rank job."""
    claimed: dict[int, set] = {}
    for rec in records:
        if _world(rec) is not None:
            claimed.setdefault(_world(rec), set()).add(rank_of(rec)[0])
    unsized = {rank_of(rec)[0] for rec in records if _world(rec) is None}
    out = {}
    for world, ranks in claimed.items():
        present = {r for r in ranks | unsized if r is not None and r < world}
        out[world] = (len(ranks - {None}), len(present) / world)
    return out


def as_cycles(recs: list) -> list | None:
    """``recs`` in time order when they are cycles of one rank (one claimed rank, one
    process, each one's steps, else its time, after the previous one's), else None."""
    recs = sorted(recs, key=lambda r: (r.meta.get("span_ns") or [0])[0])
    if len({rank_of(r)[0] for r in recs}) > 1 or len(_by_process(recs)) > 1:
        return None
    for a, b in zip(recs, recs[1:]):
        if not (_after(a.meta.get("step_range"), b.meta.get("step_range"))
                or _after(a.meta.get("span_ns"), b.meta.get("span_ns"))):
            return None
    return recs


def cycle_numbers(files: list) -> list[int]:
    """Each file's cycle: K of profkit's ``rank{R}.cycle{K}`` naming (0 for the first
    cycle's ``rank{R}.pt.trace.json.gz``) when every file has it, else its place in time."""
    named = [discover.profkit_name(f.path) for f in files]
    if all(named) and len({n[1] for n in named}) == len(named):
        return [n[1] for n in named]
    return list(range(len(files)))


def step_offsets(metas: list[dict]) -> list[int]:
    """What to add to each cycle's ProfilerStep numbers so that they stay unique: 0 while
    they go on from the previous cycle's (torch.profiler's numbering), else the shift that
    makes them do so (separate profiler sessions in one process each count from 0)."""
    offsets, last = [], None
    for meta in metas:
        first = (meta.get("step_range") or [None])[0]
        shift = 0 if first is None or last is None or first > last else last + 1 - first
        offsets.append(shift)
        if meta.get("step_range"):
            last = meta["step_range"][1] + shift
    return offsets


def select_cycle(chosen: dict[int, RankFiles], cycle: int, notes: list[str]) -> dict[int, RankFiles]:
    """Only cycle ``cycle`` of each rank; ranks without it are left out with a note."""
    out, missing = {}, []
    for rank, rf in chosen.items():
        if cycle in rf.cycles:
            i = rf.cycles.index(cycle)
            out[rank] = RankFiles([rf.files[i]], rf.source, [cycle])
        else:
            missing.append(rank)
    if missing:
        notes.append(f"{ranks_text(missing)}: no profiler cycle {cycle}; left out")
    return out


def cycle_notes(chosen: dict[int, RankFiles], cycle: int | None) -> list[str]:
    """One line per distinct way ranks were read from several files (or one cycle of
    several), naming the ranks."""
    by_text: dict[str, list[int]] = {}
    for rank, rf in chosen.items():
        if cycle is not None:
            text = f"profiler cycle {cycle} read"
        elif len(rf.files) > 1:
            steps = _steps_text([f.meta for f in rf.files])
            text = f"{len(rf.files)} profiler cycles read{steps}"
        else:
            continue
        by_text.setdefault(text, []).append(rank)
    return [f"{ranks_text(ranks)}: {text}" for text, ranks in by_text.items()]


def _steps_text(metas: list[dict]) -> str:
    offsets = step_offsets(metas)
    ranges = [[m["step_range"][0] + o, m["step_range"][1] + o]
              for m, o in zip(metas, offsets) if m.get("step_range")]
    if not ranges:
        return ""
    renumbered = " (renumbered: the cycles' ProfilerStep numbers repeat)" if any(offsets) else ""
    return f" as steps {ranges[0][0]}-{ranges[-1][1]}{renumbered}"


def _short(host: str) -> str:
    return host.split(".")[0].lower()


def _process_key(rec) -> tuple:
    """Files of one process share this; a file whose process is unknown is its own."""
    pid = rec.meta.get("pid")
    if pid is None:
        return ("file", rec.path)
    host = rec.meta.get("host")
    return (_short(host) if isinstance(host, str) else None, pid)


def _by_process(recs: list) -> list[list]:
    groups: dict[tuple, list] = {}
    for rec in recs:
        groups.setdefault(_process_key(rec), []).append(rec)
    return list(groups.values())


def _cycle_groups(recs: list) -> list[list]:
    """Unranked files: one group per process whose files are cycles, else one per file."""
    out = []
    for group in _by_process(recs):
        ordered = as_cycles(group) if len(group) > 1 else group
        out.extend([ordered] if ordered else [[r] for r in group])
    return sorted(out, key=lambda g: min(recs.index(r) for r in g))


def _is_copy(a: dict, b: dict) -> bool:
    if a.get("trace_id") and a.get("trace_id") == b.get("trace_id"):
        return True
    keys = ("pid", "span_ns", "raw_event_count")
    return a.get("span_ns") is not None and all(a.get(k) == b.get(k) for k in keys)


def _after(a: list | None, b: list | None) -> bool:
    """Range ``b`` lies wholly after range ``a`` (both known)."""
    return bool(a and b) and b[0] > a[1]


def _overlapping(groups: list[list], peers: list) -> int | None:
    """The one group whose events overlap the other ranks' time, if exactly one does."""
    peers = [p for p in peers if p]
    if not peers:
        return None
    lo, hi = min(p[0] for p in peers), max(p[1] for p in peers)
    hits = [i for i, g in enumerate(groups)
            if any(_overlaps(r.meta.get("span_ns"), lo, hi) for r in g)]
    return hits[0] if len(hits) == 1 else None


def _overlaps(span: list | None, lo: int, hi: int) -> bool:
    return bool(span) and span[0] <= hi and span[1] >= lo


def _profkit_named(rank: int, groups: list[list]) -> int | None:
    hits = [i for i, g in enumerate(groups)
            if all((discover.profkit_name(r.path) or (None,))[0] == rank for r in g)]
    return hits[0] if len(hits) == 1 else None


def _conflict(rank: int, recs: list) -> str:
    files = "; ".join(f"{r.path} ({_describe(r.meta)})" for r in recs)
    return (f"rank {rank} is claimed by {len(recs)} traces that cannot be told apart: {files}. "
            f"Move the ones that are not this run's out of the folder, or leave rank {rank} "
            "out with --ranks")


def _describe(meta: dict) -> str:
    span = meta.get("span_ns")
    when = "no events" if not span else f"{_utc(span[0])} to {_utc(span[1])} UTC"
    return f"process {meta.get('pid', '?')}, {when}"


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
