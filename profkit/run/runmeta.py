"""``run.json`` and ``ranks/rank{R}.json`` of a profkit run directory, validated once.

Keys profkit computes with (world size, clock offsets, ranks, GPUs, hosts, times, status)
are checked and a wrong-typed value is dropped with a note, so that nothing downstream meets
a string where an int belongs; keys profkit only shows (argv, env, versions, ...) are kept
as written. See docs/run-directory.md for the layout.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import orjson

from profkit.atomic import TMP_PREFIX, is_stale
from profkit.model import SkippedFile
from profkit.run import discover
from profkit.validate import (
    MAX_ABS_NS,
    MAX_OFFSET_NS,
    MAX_RANKS,
    Problems,
    as_dict,
    as_list,
    field_int,
    field_text,
    int_in,
    typed_record,
)

RUN_JSON = "run.json"
RANK_STATUS_DIR = "ranks"
INT32_MAX = (1 << 31) - 1
_INTS = {"world_size": (1, MAX_RANKS), "started_ns": (0, MAX_ABS_NS), "ended_ns": (0, MAX_ABS_NS)}
_TEXTS = ("schema", "run_id", "status")
# device -1: a rank without a GPU (the collectors write it for CPU-only processes)
_RANK_INTS = {"pid": (0, MAX_ABS_NS), "local_rank": (0, MAX_RANKS - 1), "device": (-1, INT32_MAX)}
_RANK_TEXTS = ("host", "gpu_uuid")
_GPU_INTS = {"sm_count": (1, INT32_MAX), "memory_bytes": (0, MAX_ABS_NS), "index": (0, INT32_MAX)}
_GPU_TEXTS = ("name", "uuid", "host")

log = logging.getLogger(__name__)


def read_json(path: Path) -> Any:
    """The JSON document of a small metadata file; raises OSError or ValueError."""
    return orjson.loads(path.read_bytes())


def rank_key(key: Any) -> int | None:
    """A rank written as an object key ("3"), or None."""
    if not isinstance(key, str) or not key.isdecimal():
        return None
    return int_in(int(key), 0, MAX_RANKS - 1)


def clean_run_meta(doc: Any, problems: Problems) -> dict[str, Any]:
    """run.json's facts with every computed-with key typed (a bad one dropped and noted)."""
    if not isinstance(doc, dict):
        problems.bad("run.json", doc, "is not an object (ignored)")
        return {}
    out = dict(doc)
    for key, (lo, hi) in _INTS.items():
        out[key] = field_int(doc, key, lo, hi, problems)
    for key in _TEXTS:
        out[key] = field_text(doc, key, problems)
    out["hosts"] = _texts(doc.get("hosts"), "hosts", problems)
    out["gpus"] = _records(as_list(doc.get("gpus"), "gpus", problems), "gpus", _GPU_INTS,
                           _GPU_TEXTS, problems)
    out["ranks"] = _rank_map(doc.get("ranks"), problems)
    out["clock_offsets_ns"] = _offsets(doc.get("clock_offsets_ns"), problems)
    out["process_groups"] = [g for g in as_list(doc.get("process_groups"), "process_groups",
                                                 problems) if isinstance(g, dict)]
    out["error"] = _error(doc.get("error"), problems)
    return {k: v for k, v in out.items() if k in doc and (v is not None or doc[k] is None)}


def _texts(value: Any, label: str, problems: Problems) -> list[str]:
    items = as_list(value, label, problems)
    kept = [v for v in items if isinstance(v, str)]
    if len(kept) < len(items):
        problems.bad(label, value, f"has {len(items) - len(kept)} entries that are not text (ignored)")
    return kept


def _records(items: list, label: str, ints: dict, texts: tuple, problems: Problems) -> list[dict]:
    out = [typed_record(item, f"{label}[{i}]", ints, texts, problems) for i, item in enumerate(items)]
    return [r for r in out if r is not None]


def _rank_map(value: Any, problems: Problems) -> dict[str, dict]:
    out = {}
    for key, entry in as_dict(value, "ranks", problems).items():
        record = typed_record(entry, f"ranks[{key!r}]", _RANK_INTS, _RANK_TEXTS, problems)
        if rank_key(key) is None:
            problems.bad("ranks key", key, "is not a rank (ignored)")
        elif record is not None:
            out[key] = record
    return out


def _offsets(value: Any, problems: Problems) -> dict[str, int]:
    out = {}
    for key, offset in as_dict(value, "clock_offsets_ns", problems).items():
        ns = int_in(offset, -MAX_OFFSET_NS, MAX_OFFSET_NS)
        if rank_key(key) is None or ns is None:
            problems.bad(f"clock_offsets_ns[{key!r}]", offset, "is not a rank's offset in ns (ignored)")
        else:
            out[key] = ns
    return out


def _error(value: Any, problems: Problems) -> dict[str, str] | None:
    err = as_dict(value, "error", problems)
    if not err:
        return None
    return {k: str(err.get(k, "")) for k in ("type", "message")}


def read_run_meta(folder: Path) -> tuple[dict[str, Any], Problems]:
    """(run.json's validated facts, what was wrong); ({}, []) without a run.json. An
    unreadable run.json is one problem and reads as empty (the traces alone are read)."""
    problems = Problems()
    path = folder / RUN_JSON
    if not path.is_file():
        return {}, problems
    try:
        doc = read_json(path)
    except (OSError, ValueError) as exc:
        problems.append(f"unreadable ({exc}); reading the traces alone")
        return {}, problems
    return clean_run_meta(doc, problems), problems


def clean_rank_status(doc: Any) -> dict[str, Any]:
    """A rank's own status file, checked: raises ValueError saying what is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    rank = int_in(doc.get("rank"), 0, MAX_RANKS - 1)
    if rank is None:
        raise ValueError(f"rank {doc.get('rank')!r:.40} is not a rank")
    status = doc.get("status")
    if status is not None and not isinstance(status, str):
        raise ValueError(f"status of type {type(status).__name__} is not text")
    return {**doc, "rank": rank, "status": status}


def read_rank_status_file(path: Path) -> dict[str, Any]:
    """One ``ranks/rank{R}.json``; raises OSError or ValueError for a bad file."""
    return clean_rank_status(read_json(path))


MAX_LOSS_CHARS = 300  # a capture-loss line stays one readable line, whatever the file holds
_LOST_WHAT = {"trace": "the trace", "nvml": "NVML samples", "flight recorder":
              "the flight-recorder dump", "report": "the in-job report"}


def capture_stop(status: dict[str, Any]) -> str | None:
    """Where and why a rank's capture stopped on a failed write (its status file's
    ``capture_stopped``), as one line; None when it did not."""
    stopped = status.get("capture_stopped")
    if not isinstance(stopped, dict):
        return None
    step = int_in(stopped.get("step"), 0, MAX_ABS_NS)
    where = f" at step {step}" if step is not None else ""
    failed = (f"cannot write {_text(stopped['file'])}" if stopped.get("file")
              else f"the {_text(stopped.get('what'))} failed")
    return _clip(f"capture stopped{where}: {failed}: {_text(stopped.get('cause'))}")


def capture_loss(status: dict[str, Any]) -> str | None:
    """What a rank's status file says its capture lost (``capture_stopped`` and ``lost``,
    written when a write failed during the job: a full disk, ...), as one line; None when
    it lost nothing."""
    lost = status.get("lost")
    lost = [e for e in lost if isinstance(e, dict)] if isinstance(lost, list) else []
    parts = [capture_stop(status) or ""] + (
        ["lost: " + ", ".join(_lost_item(e) for e in lost)] if lost else [])
    line = "; ".join(p for p in parts if p)
    return _clip(line) if line else None


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LOSS_CHARS else line[:MAX_LOSS_CHARS - 3] + "..."


def _lost_item(entry: dict[str, Any]) -> str:
    what = _LOST_WHAT.get(str(entry.get("what")), _text(entry.get("what")))
    samples = int_in(entry.get("samples"), 0, MAX_ABS_NS)
    if samples is not None:
        what = f"{samples} {what}"
    cycle = int_in(entry.get("cycle"), 0, MAX_ABS_NS)
    if cycle is not None:
        what = f"{what} of profiler cycle {cycle}"
    return f"{what} ({_text(entry.get('file'))})" if entry.get("file") else what


def _text(value: Any) -> str:
    return " ".join(str(value).split())[:120] if value is not None else "?"


def read_rank_status(folder: Path, skipped: list[SkippedFile] | None = None) -> dict[int, dict]:
    """Each rank's own final status (``ranks/rank{R}.json``) in a profkit run directory; a
    bad file is logged and listed in ``skipped``."""
    out = {}
    for path in sorted((folder / RANK_STATUS_DIR).glob("rank*.json")):
        try:
            status = read_rank_status_file(path)
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable rank status skipped (%s)", path, exc)
            if skipped is not None:
                skipped.append(SkippedFile(str(path), f"unreadable rank status ({exc})"))
            continue
        out[status["rank"]] = status
    return out


def capture_losses(folder: Path) -> dict[int, str]:
    """rank -> what its capture lost (a write failed during the job), from the rank status
    files of a profkit run directory."""
    found = {r: capture_loss(s) for r, s in read_rank_status(folder).items()}
    return {r: why for r, why in sorted(found.items()) if why}


# A trace a capture was saving when it stopped: ``.tmp-<target>.<pid>-<machine>.<random>``
# (profkit.atomic.tmp_name), with ``.json`` (Kineto's export) or ``.json.tmp`` (Kineto's own
# temporary) after it; <target> is profkit's name of the rank's trace (discover.profkit_name).
_PARTIAL_RE = re.compile(r"^\.tmp-(?P<target>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.[0-9a-f]{8}(?:\.\w+){0,2}$")
TRACES_DIR = "traces"


def unfinished_capture(folder: Path, meta: dict[str, Any]) -> str:
    """Why a profkit run directory without a trace has none, when it shows: run.json still
    says ``running`` (the job is capturing, or was killed before it saved a trace) and the
    partial traces a stopped save left (rank, cycle, file, whether its writer is gone); ""
    when it shows neither."""
    parts = []
    if meta.get("status") == "running":
        parts.append("run.json says the capture is still running (status \"running\"): the job "
                     "is still capturing, or was killed before it saved a trace")
    partials = [_partial_text(folder, p) for p in _partial_traces(folder)]
    if partials:
        parts.append("partial traces, never finished: " + "; ".join(partials))
    return "; ".join(parts)


def _partial_traces(folder: Path) -> list[Path]:
    out = []
    for where in (folder, folder / TRACES_DIR):
        try:
            names = sorted(os.listdir(where))
        except OSError:
            continue
        out += [where / n for n in names if n.startswith(TMP_PREFIX) and _partial_of(n)]
    return out


def _partial_of(name: str) -> tuple[int, int] | None:
    """(rank, cycle) of a partial trace's name; None for other temporaries."""
    match = _PARTIAL_RE.match(name)
    return discover.profkit_name(match.group("target")) if match else None


def _partial_text(folder: Path, path: Path) -> str:
    rank, cycle = _partial_of(path.name)
    pid = _PARTIAL_RE.match(path.name).group("pid")
    writer = (f"its writer, process {pid}, is gone" if is_stale(path)
              else f"process {pid} may still be writing it")
    return f"rank {rank} cycle {cycle} ({path.relative_to(folder)}: {writer})"
