"""Parse ``NCCL_DEBUG=INFO`` log text into DataFrames (core side: no torch).

Lines look like ``host:pid:tid [dev] NCCL INFO <message>``. Recognised messages:

- communicator init: ``comm 0x.. rank R nranks N cudaDev D nvmlDev D busId B commId 0x.. -
  Init START|COMPLETE`` (also with a ``ncclCommInitRank`` prefix), ``comm 0x.. rank R nRanks N
  nNodes H localRanks L localRank l``
- rings: ``Channel 00/24 :    0   1   2   3``
- trees: ``Trees [0] 1/-1/-1->0->-1 [1] ...``
- transports: ``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read`` (also ``[send]``/``[receive]``
  and ``NET/IB/0/GDRDMA``)
- tuning (``NCCL_DEBUG_SUBSYS=TUNING``): ``AllReduce: 4194304 Bytes -> Algo 1 proto 2 time
  35.1`` (algo/proto as numbers or names)
- collective calls (``COLL``): ``AllReduce: opCount 3 sendbuff .. count 1024 datatype 7 op 0
  root 0 comm 0x.. [nranks=2] stream 0x..``
- environment: ``NCCL_IB_HCA set by environment to mlx5_0``, and ``NCCL version 2.21.5+cuda12.4``
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from profkit.columns import to_int
from profkit.errors import TraceError
from profkit.model import SkippedFile, read_each

log = logging.getLogger(__name__)

NCCL_SUBDIR = "nccl"
PREFIX_COLUMNS = ("host", "pid", "tid", "dev")
ALGO_NAMES = {0: "Tree", 1: "Ring", 2: "CollNetDirect", 3: "CollNetChain", 4: "NVLS",
              5: "NVLSTree", 6: "PAT"}
PROTO_NAMES = {0: "LL", 1: "LL128", 2: "Simple"}
# ncclDataType_t -> bytes per element (int8, uint8, int32, uint32, int64, uint64, half,
# float, double, bfloat16, fp8 e4m3, fp8 e5m2).
NCCL_DTYPE_BYTES = {0: 1, 1: 1, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 1, 11: 1}

_PREFIX = re.compile(r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>[^\]]*)\]\s+"
                     r"NCCL INFO\s+(?P<msg>.*?)\s*$")
_VERSION = re.compile(r"NCCL version (?P<version>\S+)")
_INIT = re.compile(r"(?:ncclCommInit\w*\s+)?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) "
                   r"nranks (?P<nranks>\d+) cudaDev (?P<cuda_dev>\d+) nvmlDev (?P<nvml_dev>\d+) "
                   r"busId (?P<bus_id>\w+) commId (?P<comm_id>0x[0-9a-f]+)"
                   r".*?- Init (?P<phase>START|COMPLETE)")
_TOPO = re.compile(r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) "
                   r"nNodes (?P<nnodes>\d+) localRanks (?P<local_ranks>\d+) "
                   r"localRank (?P<local_rank>\d+)")
_RING = re.compile(r"^Channel (?P<channel>\d+)/(?P<nchannels>\d+) :\s+(?P<order>[\d\s]+)$")
_TREES = re.compile(r"^Trees((?:\s*\[\d+\]\s*\S+)+)$")
_TREE_ITEM = re.compile(r"\[(?P<channel>\d+)\]\s*(?P<down>[-\d/]+)->(?P<rank>-?\d+)->(?P<up>-?\d+)")
_TRANSPORT = re.compile(r"^Channel (?P<channel>\d+)/(?P<conn>\d+) : (?P<src>\d+)\[(?P<src_dev>\w+)\]"
                        r" -> (?P<dst>\d+)\[(?P<dst_dev>\w+)\](?: \[(?P<dir>send|receive)\])?"
                        r" via (?P<via>\S+)")
_TUNING = re.compile(r"^(?P<func>[A-Za-z]+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) "
                     r"proto (?P<proto>\w+)(?: time (?P<time>[-\d.eE+]+))?")
_COLL = re.compile(r"^(?P<func>[A-Za-z]+): opCount (?P<op_count>(?:0x)?[0-9a-f]+) .*?count (?P<count>\d+)"
                   r" datatype (?P<datatype>\d+) op (?P<op>\d+) root (?P<root>-?\d+) "
                   r"comm (?P<comm>0x[0-9a-f]+)(?: \[nranks=(?P<nranks>\d+)\])?")
_ENV = re.compile(r"^(?P<name>NCCL_\w+) set by environment to (?P<value>.*)$")

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "comms": PREFIX_COLUMNS + ("comm", "comm_id", "rank", "nranks", "cuda_dev", "nvml_dev",
                               "bus_id", "phase"),
    "topology": PREFIX_COLUMNS + ("comm", "rank", "nranks", "nnodes", "local_ranks",
                                  "local_rank"),
    "rings": PREFIX_COLUMNS + ("channel", "nchannels", "order"),
    "trees": PREFIX_COLUMNS + ("channel", "rank", "up", "down"),
    "transports": PREFIX_COLUMNS + ("channel", "conn", "src", "src_dev", "dst", "dst_dev",
                                    "direction", "via", "transport"),
    "tuning": PREFIX_COLUMNS + ("func", "bytes", "algo", "proto", "time_us"),
    "colls": PREFIX_COLUMNS + ("func", "op_count", "count", "datatype", "bytes", "op", "root",
                               "comm", "nranks"),
    "env": PREFIX_COLUMNS + ("name", "value"),
    "versions": ("host", "pid", "version"),
}
INT_COLUMNS = {"pid", "tid", "rank", "nranks", "cuda_dev", "nvml_dev", "nnodes", "local_ranks",
               "local_rank", "channel", "nchannels", "up", "conn", "src", "dst", "bytes",
               "op_count", "count", "datatype", "op", "root"}


def _name(value: str, names: dict[int, str]) -> str:
    return names.get(int(value), value) if value.isdecimal() else value


def _comm(m: re.Match) -> list[tuple[str, dict]]:
    return [("comms", m.groupdict())]


def _ring(m: re.Match) -> list[tuple[str, dict]]:
    d = m.groupdict()
    d["order"] = " ".join(d["order"].split())
    return [("rings", d)]


def _trees(m: re.Match) -> list[tuple[str, dict]]:
    return [("trees", t.groupdict()) for t in _TREE_ITEM.finditer(m.group(1))]


def _transport(m: re.Match) -> list[tuple[str, dict]]:
    d = m.groupdict()
    d["direction"] = d.pop("dir") or ""
    d["transport"] = d["via"].split("/", 1)[0]
    return [("transports", d)]


def _tuning(m: re.Match) -> list[tuple[str, dict]]:
    d = m.groupdict()
    d["algo"], d["proto"] = _name(d["algo"], ALGO_NAMES), _name(d["proto"], PROTO_NAMES)
    d["time_us"] = float(d.pop("time")) if d["time"] else float("nan")
    return [("tuning", d)]


def _coll(m: re.Match) -> list[tuple[str, dict]]:
    d = m.groupdict()
    d["op_count"] = int(d["op_count"], 16)  # printed with %lx
    d["bytes"] = int(d["count"]) * NCCL_DTYPE_BYTES.get(int(d["datatype"]), 0)
    d["nranks"] = d["nranks"] or -1
    return [("colls", d)]


_RULES: tuple[tuple[re.Pattern, Callable[[re.Match], list[tuple[str, dict]]]], ...] = (
    (_INIT, _comm),
    (_TOPO, lambda m: [("topology", m.groupdict())]),
    (_TRANSPORT, _transport),
    (_RING, _ring),
    (_TREES, _trees),
    (_TUNING, _tuning),
    (_COLL, _coll),
    (_ENV, lambda m: [("env", m.groupdict())]),
)


def parse_nccl_log(text: str) -> dict[str, pd.DataFrame]:
    """All recognised tables of one log (keys of ``TABLE_COLUMNS``; empty frames when a
    kind of line is absent). Unrecognised lines are ignored."""
    rows: dict[str, list[dict]] = {k: [] for k in TABLE_COLUMNS}
    last_prefix = {"host": "", "pid": -1}
    for line in text.splitlines():
        m = _PREFIX.match(line)
        if m is None:
            v = _VERSION.search(line)  # printed without the INFO prefix by rank 0
            if v:
                rows["versions"].append({**last_prefix, "version": v.group("version")})
            continue
        prefix = {k: m.group(k) for k in PREFIX_COLUMNS}
        last_prefix = {"host": prefix["host"], "pid": prefix["pid"]}
        msg = m.group("msg")
        for rx, handler in _RULES:
            hit = rx.search(msg) if rx in (_INIT, _TOPO) else rx.match(msg)
            if hit:
                for table, d in handler(hit):
                    rows[table].append({**prefix, **d})
                break
    return {k: _frame(k, v) for k, v in rows.items()}


def _frame(table: str, rows: list[dict]) -> pd.DataFrame:
    cols = TABLE_COLUMNS[table]
    df = pd.DataFrame(rows, columns=list(cols))
    for c in cols:
        if c in INT_COLUMNS:
            df[c] = to_int(pd.to_numeric(df[c], errors="coerce").to_numpy(np.float64))
    if "time_us" in df:
        df["time_us"] = df["time_us"].astype("float64")
    return df


def parse_tuning(text: str) -> pd.DataFrame:
    """Only the ``<Func>: N Bytes -> Algo X proto Y`` lines."""
    return parse_nccl_log(text)["tuning"]


def _rank_map(declared: dict[str, dict]) -> dict[tuple[str, int], int]:
    """(host, pid) -> global rank, from run.json's validated ``ranks``."""
    return {(r["host"], r["pid"]): int(k) for k, r in declared.items()
            if isinstance(r.get("host"), str) and isinstance(r.get("pid"), int)}


def _parse_log_file(path: Path) -> dict[str, pd.DataFrame]:
    try:
        return parse_nccl_log(path.read_text(errors="replace"))
    except (OSError, ValueError, MemoryError) as exc:
        raise TraceError(str(path), f"NCCL log not read ({type(exc).__name__}: {exc})") from None


def load_nccl_dir(run_dir: str | Path, skipped: list[SkippedFile] | None = None,
                  ranks: dict[str, dict] | None = None) -> dict[str, pd.DataFrame]:
    """Every NCCL log (``nccl/*.log``) and flight-recorder dump of a run directory.

    Returns the tables of :func:`parse_nccl_log` concatenated over files, each with ``file``
    and ``global_rank`` columns (from run.json's host/pid, -1 if unknown; ``rank`` columns
    are ranks within the communicator), plus
    ``flight_recorder`` (see :mod:`profkit.nccl.flight_recorder`). ``ranks``: run.json's
    validated ``ranks`` (:func:`profkit.run.runmeta.read_run_meta`; none known when not
    given). A file that cannot be read raises
    :class:`TraceError`, or, when ``skipped`` is given, is logged, listed there and left out."""
    from profkit.nccl.flight_recorder import load_flight_recorder_dir

    run_dir = Path(run_dir)
    by_process = _rank_map(ranks or {})
    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in TABLE_COLUMNS}
    logs = sorted((run_dir / NCCL_SUBDIR).glob("*.log"))
    for path, tables in read_each(logs, _parse_log_file, skipped, log):
        for table, df in tables.items():
            if len(df):
                parts[table].append(df.assign(file=path.name))
    out = {}
    for table, dfs in parts.items():
        df = (pd.concat(dfs, ignore_index=True) if dfs
              else _frame(table, []).assign(file=pd.Series(dtype="object")))
        df["global_rank"] = pd.Series(
            [by_process.get((h, int(p)), -1) for h, p in zip(df["host"], df["pid"], strict=True)],
            index=df.index, dtype="int64")
        out[table] = df
    out["flight_recorder"] = load_flight_recorder_dir(run_dir, skipped)
    return out
