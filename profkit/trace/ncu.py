"""Nsight Compute's CSV: the metrics profkit asks ncu for, which of them a given ncu knows,
and its per-launch results decoded into rows with units in the column names.

Standard library only: ``profkit ncu`` (the capture side) parses with it, and the analysis
reads the table it writes (:mod:`profkit.run.ncufiles`).

ncu writes a metric either as its own row (``--page details``: ``"ID", ..., "Kernel Name",
..., "Metric Name", "Metric Unit", "Metric Value"``) or as a column (``--page raw``: one row
of metric names, one of units, then one row per launch); both are read. Values are scaled to
base units (bytes, ns, percent) whatever ncu's ``--print-units``; thousands separators are
dropped; ``n/a`` and unreadable values are missing, never zero.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from profkit.classify.kernelkey import function_name

# RUN/ncu/: what profkit ncu writes into a run directory (docs/run-directory.md)
NCU_DIR = "ncu"
REPORT_NAME = "report.ncu-rep"
TABLE_NAME = "counters.csv"
META_NAME = "ncu.json"
LOG_NAME = "ncu.log"
SCHEMA = "profkit.ncu/1"


@dataclass(frozen=True)
class Metric:
    column: str  # profkit's column, unit in its name
    names: tuple[str, ...]  # ncu metrics that answer it, in order of preference


# What each stored counter answers: DRAM traffic and its share of the peak, SM and memory
# throughput (speed of light), the tensor and FP32 pipes, achieved occupancy, L2 hit rate.
METRICS = (
    Metric("duration_ns", ("gpu__time_duration.sum",)),
    Metric("dram_read_bytes", ("dram__bytes_read.sum",)),
    Metric("dram_write_bytes", ("dram__bytes_write.sum",)),
    Metric("dram_bytes", ("dram__bytes.sum",)),  # read + write, where the split is not known
    Metric("dram_pct", ("dram__throughput.avg.pct_of_peak_sustained_elapsed",)),
    Metric("mem_pct", ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",)),
    Metric("sm_pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)),
    # the HMMA pipe counts Hopper's warpgroup MMA too (bf16 nvjet GEMMs at 96% on an H100)
    Metric("tensor_pct", tuple(
        f"sm__pipe_tensor_op_{p}_cycles_active.avg.pct_of_peak_sustained_active"
        for p in ("hmma", "hmma_type_hmma_hgmma_qgmma"))),
    Metric("fma_pct", ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",)),
    Metric("occupancy_pct", ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
    Metric("l2_hit_pct", ("lts__t_sector_hit_rate.pct",)),
)
# Warp-stall reasons (WarpStateStats); "selected" is issuing, not a stall.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle",
                 "math_pipe_throttle", "tex_throttle", "barrier", "membar", "wait", "gmma",
                 "not_selected", "no_instruction", "branch_resolving", "dispatch_stall",
                 "drain", "imc_miss", "misc", "sleeping")
# Two spellings of the same question, newest first; the first one this ncu knows is used:
# warp cycles per issued instruction spent stalled for the reason, or the share of active
# warps stalled for it. Either ranks the reasons.
STALL_FAMILIES = ("smsp__average_warps_issue_stalled_{}_per_issue_active.ratio",
                  "smsp__warp_issue_stalled_{}_per_warp_active.pct")
STALL_PREFIX = "stall_"
ID_COLUMNS = ("id", "pid", "kernel", "function", "grid", "block", "device", "cc", "stream",
              "trace_kernel")
METRIC_COLUMNS = tuple(m.column for m in METRICS) + tuple(STALL_PREFIX + r for r in STALL_REASONS)
COLUMNS = ID_COLUMNS + METRIC_COLUMNS
# the fields of ncu's CSV that name a launch, as profkit's columns
_FIELDS = {"ID": "id", "Process ID": "pid", "Kernel Name": "kernel", "Grid Size": "grid",
           "Block Size": "block", "Device": "device", "CC": "cc", "Stream": "stream"}
_METRIC_TOKEN = re.compile(r"\b[a-z0-9]+__[A-Za-z0-9_.]+")
# Asked for when ncu cannot list what it knows: seen answering on an H100 (ncu 2025.3).
FALLBACK = ("duration_ns", "dram_read_bytes", "dram_write_bytes", "dram_pct", "sm_pct",
            "tensor_pct", "fma_pct")
_SCALE = {"byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
          "kibyte": 2**10, "mibyte": 2**20, "gibyte": 2**30,
          "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
          "s": 1e9, "second": 1e9}


def base_name(metric: str) -> str:
    """A metric without its roll-up and suffix (``dram__bytes_read.sum`` -> ``dram__bytes_read``):
    the name ``ncu --query-metrics`` lists."""
    return metric.split(".", 1)[0]


def known_metrics(query_output: str) -> set[str]:
    """Base names that ``ncu --query-metrics`` mentions (as ``grep -w`` would find them)."""
    return {base_name(t) for t in _METRIC_TOKEN.findall(query_output)}


def metrics_to_ask(known: set[str] | None) -> tuple[list[str], dict[str, str]]:
    """(ncu metrics to ask for, {column: metric}) given the base names this ncu knows
    (None: it could not say; then only :data:`FALLBACK`, no stall reasons)."""
    chosen: dict[str, str] = {}
    for m in METRICS:
        name = next((n for n in m.names if known is None or base_name(n) in known), None)
        if name and (known is not None or m.column in FALLBACK):
            chosen[m.column] = name
    for family in STALL_FAMILIES if known is not None else ():
        stalls = {STALL_PREFIX + r: family.format(r) for r in STALL_REASONS}
        stalls = {c: n for c, n in stalls.items() if known is None or base_name(n) in known}
        if stalls:
            chosen.update(stalls)
            break
    return list(dict.fromkeys(chosen.values())), chosen


def number(text: str | None, unit: str | None = "") -> float:
    """A value of ncu's CSV in base units (NaN when missing or not a number)."""
    if text is None:
        return math.nan
    cleaned = text.strip().replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return math.nan
    unit = (unit or "").strip().lower()
    per_second = unit.endswith("/second") or unit.endswith("/s")
    base = unit.split("/")[0] if per_second else unit
    return value * _SCALE.get(base, 1.0)


def parse_csv(text: str, columns: dict[str, str]) -> list[dict]:
    """One row per profiled launch (:data:`COLUMNS`) from ncu's CSV (details or raw page);
    ``columns`` maps profkit's column to the ncu metric that fills it."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]  # drop ==PROF== lines
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return []
    header = rows[0]
    metric_of = {v: k for k, v in columns.items()}
    if "Metric Name" in header:
        return _parse_long(header, rows[1:], metric_of)
    return _parse_wide(header, rows[1:], metric_of)


def _launch(record: dict[str, str]) -> dict:
    row: dict = {c: None for c in COLUMNS}
    for field, col in _FIELDS.items():
        if field in record:
            row[col] = record[field]
    for col in ("id", "pid", "device"):
        row[col] = _int(row[col])
    row["function"] = function_name(row["kernel"] or "")
    for col in METRIC_COLUMNS:
        row[col] = math.nan
    return row


def _int(text) -> int | None:
    try:
        return int(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def _parse_long(header: list[str], rows: list[list[str]], metric_of: dict[str, str]) -> list[dict]:
    at = {name: i for i, name in enumerate(header)}
    launches: dict[str, dict] = {}
    for cells in rows:
        if len(cells) != len(header):
            continue
        record = dict(zip(header, cells))
        launch = launches.get(record.get("ID", ""))
        if launch is None:
            launch = launches[record.get("ID", "")] = _launch(record)
        col = metric_of.get(cells[at["Metric Name"]])
        if col:
            launch[col] = number(cells[at["Metric Value"]], record.get("Metric Unit"))
    return list(launches.values())


def _parse_wide(header: list[str], rows: list[list[str]], metric_of: dict[str, str]) -> list[dict]:
    if "Kernel Name" not in header:
        return []
    units = rows[0] if rows and not rows[0][header.index("Kernel Name")] else None
    out = []
    for cells in rows[1:] if units else rows:
        if len(cells) != len(header):
            continue
        launch = _launch(dict(zip(header, cells)))
        for i, name in enumerate(header):
            col = metric_of.get(name)
            if col:
                launch[col] = number(cells[i], units[i] if units else "")
        out.append(launch)
    return out


def write_table(rows: list[dict]) -> bytes:
    """The per-launch rows as profkit's ``counters.csv`` (:data:`COLUMNS`, NaN as empty)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if isinstance(v, float) and math.isnan(v) else
                             "" if v is None else v) for k, v in row.items()})
    return buf.getvalue().encode()
