"""Read PyTorch NCCL flight-recorder dumps (core side: no torch).

A dump is a pickle of ``{"version", "pg_config", "pg_status", "comm_lib_version",
"nccl_comm_state"?, "entries": [...]}`` as written by
``torch._C._distributed_c10d._dump_nccl_trace()`` / ``_dump_fr_trace()`` or by
``TORCH_NCCL_DUMP_ON_TIMEOUT`` (file ``{TORCH_FR_DUMP_TEMP_FILE}{rank}``). Only plain
Python containers are unpickled: any class reference in the data is refused. A dump larger
than :data:`MAX_DUMP_BYTES`, or one that is truncated (a rank killed mid-dump) or claims more
memory than there is, is refused with a :class:`TraceError` naming it.
"""

from __future__ import annotations

import io
import logging
import math
import pickle
import re
from pathlib import Path
from typing import Any

import pandas as pd

from profkit.errors import TraceError
from profkit.model import SkippedFile, read_each

log = logging.getLogger(__name__)
FR_GLOB = "flight_recorder_rank*"
# Dumps hold the last TORCH_NCCL_TRACE_BUFFER_SIZE collectives (a few MB for thousands of
# entries with stacks); past this a file is no dump, and reading it could exhaust memory.
MAX_DUMP_BYTES = 256 << 20
# What a malformed dump (truncated, wrong shapes, absurd sizes) raises while being read.
_DUMP_ERRORS = (pickle.UnpicklingError, ValueError, EOFError, TypeError, AttributeError,
                KeyError, IndexError, MemoryError, OverflowError, RecursionError)
_RANK_IN_NAME = re.compile(r"rank(\d+)(?:\.pkl)?$")
ENTRY_COLUMNS = (
    "rank", "pg_id", "pg_name", "pg_desc", "record_id", "collective_seq_id", "p2p_seq_id",
    "op_id", "is_p2p", "profiling_name", "collective", "state", "in_nelems", "out_nelems",
    "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "time_created_ns",
    "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "timeout_ms",
    "retired", "thread_name", "thread_id", "top_frame", "version",
)
INT_COLUMNS = ("rank", "pg_id", "record_id", "collective_seq_id", "p2p_seq_id", "op_id",
               "in_nelems", "out_nelems", "time_created_ns", "time_discovered_started_ns",
               "time_discovered_completed_ns")
PG_COLUMNS = ("rank", "pg_name", "pg_desc", "ranks")


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dump")


def load_dump(data: bytes) -> dict[str, Any]:
    """Unpickle a dump (plain containers only)."""
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(obj, dict) or "entries" not in obj and "version" not in obj:
        raise ValueError("not a flight-recorder dump (no 'entries'/'version' keys)")
    return obj


def _nelems(sizes: Any) -> int:
    total = 0
    for shape in sizes or []:
        total += math.prod(int(d) for d in shape) if shape else 1
    return total


def _top_frame(frames: Any) -> str:
    if not frames:
        return ""
    f = frames[0]
    return f"{f.get('filename', '')}:{f.get('line', '')} {f.get('name', '')}".strip()


def _entry_row(e: dict[str, Any], rank: int, version: str) -> dict[str, Any]:
    pg = e.get("process_group") or ("", "")
    name = str(e.get("profiling_name", ""))
    return {
        "rank": rank, "pg_id": e.get("pg_id", -1), "pg_name": str(pg[0]),
        "pg_desc": str(pg[1]) if len(pg) > 1 else "", "record_id": e.get("record_id", -1),
        "collective_seq_id": e.get("collective_seq_id", -1),
        "p2p_seq_id": e.get("p2p_seq_id", -1), "op_id": e.get("op_id", -1),
        "is_p2p": bool(e.get("is_p2p", False)), "profiling_name": name,
        "collective": name.split(":", 1)[-1], "state": str(e.get("state", "")),
        "in_nelems": _nelems(e.get("input_sizes")), "out_nelems": _nelems(e.get("output_sizes")),
        "input_sizes": repr(e.get("input_sizes", [])),
        "input_dtypes": ",".join(map(str, e.get("input_dtypes", []))),
        "output_sizes": repr(e.get("output_sizes", [])),
        "output_dtypes": ",".join(map(str, e.get("output_dtypes", []))),
        "time_created_ns": e.get("time_created_ns"),
        "time_discovered_started_ns": e.get("time_discovered_started_ns"),
        "time_discovered_completed_ns": e.get("time_discovered_completed_ns"),
        "duration_ms": e.get("duration_ms"), "timeout_ms": e.get("timeout_ms"),
        "retired": bool(e.get("retired", False)), "thread_name": str(e.get("thread_name", "")),
        "thread_id": str(e.get("thread_id", "")), "top_frame": _top_frame(e.get("frames")),
        "version": version,
    }


def entries_frame(dump: dict[str, Any], rank: int = -1) -> pd.DataFrame:
    """One row per flight-recorder entry. Missing timestamps are -1, a missing duration
    NaN; ``collective`` is ``profiling_name`` without its ``nccl:`` prefix."""
    version = str(dump.get("version", ""))
    rows = [_entry_row(e, rank, version) for e in dump.get("entries", []) or []]
    df = pd.DataFrame(rows, columns=list(ENTRY_COLUMNS))
    for c in INT_COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(-1).astype("int64")
    for c in ("duration_ms", "timeout_ms"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    for c in ("is_p2p", "retired"):
        df[c] = df[c].astype(bool)
    return df


def pg_config_frame(dump: dict[str, Any], rank: int = -1) -> pd.DataFrame:
    """Process groups of a dump: name, description and member ranks (as written)."""
    rows = [{"rank": rank, "pg_name": str(v.get("name", k)), "pg_desc": str(v.get("desc", "")),
             "ranks": str(v.get("ranks", ""))}
            for k, v in (dump.get("pg_config") or {}).items() if isinstance(v, dict)]
    return pd.DataFrame(rows, columns=list(PG_COLUMNS)).astype({"rank": "int64"})


def parse_flight_recorder(data: bytes, rank: int = -1) -> pd.DataFrame:
    """Bytes of one dump -> its entries (:func:`entries_frame`)."""
    return entries_frame(load_dump(data), rank)


def rank_from_name(name: str) -> int:
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else -1


def read_dump(path: Path) -> pd.DataFrame:
    """The entries of one dump file (:func:`entries_frame`); raises :class:`TraceError`
    naming the file for one that is too large or cannot be read."""
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise TraceError(str(path), f"{size:,} bytes is larger than a flight-recorder dump "
                             f"can be ({MAX_DUMP_BYTES:,}); not read")
        return parse_flight_recorder(path.read_bytes(), rank_from_name(path.name))
    except OSError as exc:
        raise TraceError(str(path), f"cannot read: {exc.strerror or exc}") from None
    except _DUMP_ERRORS as exc:
        raise TraceError(str(path), "not a readable flight-recorder dump "
                         f"({type(exc).__name__}: {exc})") from None


def load_flight_recorder_dir(run_dir: str | Path,
                             skipped: list[SkippedFile] | None = None) -> pd.DataFrame:
    """Entries of every ``nccl/flight_recorder_rank{R}[.pkl]`` dump of a run directory,
    with a ``file`` column. A dump that cannot be read raises :class:`TraceError` naming
    it, or, when ``skipped`` is given, is logged, listed there and left out."""
    dumps = [p for p in sorted((Path(run_dir) / "nccl").glob(FR_GLOB))
             if p.is_file() and not p.name.startswith(".tmp-")]
    frames = [df.assign(file=path.name) for path, df in read_each(dumps, read_dump, skipped, log)]
    if not frames:
        return entries_frame({}).assign(file=pd.Series(dtype="object"))
    return pd.concat(frames, ignore_index=True)
