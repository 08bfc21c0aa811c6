"""Every table of an analysis as files, for a spreadsheet or a notebook: one CSV (or Parquet)
file per table, named after it, and ``index.json`` listing them. Pure: Analysis in, file
names and bytes out; ``profkit analyze --tables DIR`` writes them (profkit.atomic.atomic_dir).

Values are the analysis' own (ns, bytes, fractions in [0, 1]: the units are in the column
names), at full precision, so they match the JSON report. Cells holding lists or dicts are
written as JSON text; NaN is an empty CSV cell (null in Parquet)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from profkit.analyzers.analyze import Analysis

INDEX = "index.json"
SCHEMA = "profkit.tables/1"
FORMATS = ("csv", "parquet")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def table_files(a: Analysis, fmt: str = "csv") -> dict[str, bytes]:
    """{file name: bytes}: each table of ``a`` in ``fmt`` (csv or parquet), then the index."""
    if fmt not in FORMATS:
        raise ValueError(f"table format {fmt!r}: expected one of {', '.join(FORMATS)}")
    files, entries = {}, []
    for name in sorted(a.tables):
        frame = plain_table(a.tables[name])
        file = f"{_SAFE_NAME.sub('_', name)}.{fmt}"
        files[file] = _csv(frame) if fmt == "csv" else _parquet(frame)
        entries.append({"name": name, "file": file, "rows": len(frame),
                        "columns": [str(c) for c in frame.columns]})
    index = {"schema": SCHEMA, "run": a.run.get("path"), "format": fmt, "tables": entries}
    files[INDEX] = orjson.dumps(index, option=orjson.OPT_INDENT_2) + b"\n"
    return files


def is_tables_folder(path: Path) -> bool:
    """Whether ``path`` holds an earlier ``--tables`` output (its index names this schema):
    the only kind of non-empty folder that writing tables may replace."""
    try:
        index = orjson.loads((Path(path) / INDEX).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(index, dict) and index.get("schema") == SCHEMA


def plain_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with string column names, a plain index, and object columns that hold
    lists, dicts or mixed values turned into text (JSON for lists and dicts)."""
    out = frame.reset_index(drop=True).copy()
    out.columns = [str(c) for c in out.columns]
    for col in out.columns:
        if out[col].dtype == object and not _all_text(out[col]):
            out[col] = [_cell(v) for v in out[col]]
    return out


def _all_text(column: pd.Series) -> bool:
    return all(isinstance(v, str) or v is None for v in column)


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY, default=str).decode()
    return str(value)


def _csv(frame: pd.DataFrame) -> bytes:
    if not len(frame.columns):
        return b""
    return frame.to_csv(index=False, lineterminator="\n").encode()


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
    return buf.getvalue()
