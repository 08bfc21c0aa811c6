"""Every table of an analysis as files, for a spreadsheet or a notebook: one CSV (or Parquet)
file per table, named after it, and ``index.json`` listing them. Pure: Analysis in, file
names and bytes out; ``profkit analyze --tables DIR`` writes them (profkit.atomic.atomic_dir).

Values are the analysis' own (ns, bytes, fractions in [0, 1]: the units are in the column
names), at full precision, so they match the JSON report. Cells holding lists or dicts are
written as JSON text; NaN is an empty CSV cell (null in Parquet).

A CSV is opened in a spreadsheet, which runs a cell starting with ``=``, ``+``, ``-``, ``@``,
a tab or a carriage return as a formula; a trace names its kernels and ops as it likes
(``=HYPERLINK(...)``). Such a text cell gets a leading ``'`` (shown as text, not run);
numbers, negative ones too, stay numbers. Parquet keeps the values as they are: it is data
for a program, not a sheet."""

from __future__ import annotations

import csv
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
# what a spreadsheet reads as the start of a formula (OWASP's CSV injection list)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# text that is only a number ("-3", "+1.5e-3") is read as that number, never as a formula
_PLAIN_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


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


def spreadsheet_text(value: Any) -> Any:
    """``value`` as a spreadsheet shows it and never runs it: text that would start a formula
    gets a leading ``'``; anything else (numbers, None, other text) is returned as it is."""
    if (isinstance(value, str) and value.startswith(FORMULA_START)
            and not _PLAIN_NUMBER.fullmatch(value)):
        return "'" + value
    return value


def _csv(frame: pd.DataFrame) -> bytes:
    if not len(frame.columns):
        return b""
    out = frame.copy()
    out.columns = [spreadsheet_text(c) for c in out.columns]
    carriage_return = False
    for col in range(out.shape[1]):  # text columns only: a number column keeps its numbers
        values = out.iloc[:, col]
        if values.dtype == object or isinstance(values.dtype, pd.StringDtype):
            out.isetitem(col, [spreadsheet_text(v) for v in values])
            carriage_return |= any(isinstance(v, str) and "\r" in v for v in values)
    # The csv module quotes a line break only when it is in the line terminator ("\n"), and a
    # spreadsheet ends the row at a bare "\r" too: the text after it would start a row (and
    # a formula). Such a table has its text quoted, the rare case; the others stay as they are.
    quoting = csv.QUOTE_NONNUMERIC if carriage_return else csv.QUOTE_MINIMAL
    return out.to_csv(index=False, lineterminator="\n", quoting=quoting).encode()


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buf)
    return buf.getvalue()
