"""Exported tables never carry a live spreadsheet formula: a trace names its kernels and ops
as it likes, and a name such as ``=HYPERLINK(...)`` must reach a spreadsheet as text.
Numbers, negative ones too, stay numbers; Parquet keeps the names as they are."""

import csv
import io
from types import SimpleNamespace

import pandas as pd
import pyarrow.parquet as pq
from profkit.analyzers.report.export import table_files

from profkit.cli import main
from tests.factories import trace_doc, two_step_events, write_trace, x

LINK = '=HYPERLINK("http://x","y")'
HOSTILE_OP, CMD_OP = "@SUM(1)", "+cmd|' /C calc'!A0"


def _hostile_trace(folder):
    """A one-rank trace whose GEMM kernel is named LINK and whose CPU ops are formulas."""
    events = two_step_events(0)
    for event in events:
        if event.get("name") == "sm90_xmma_gemm_bf16bf16_bf16f32":
            event["name"] = LINK
    events += [x(HOSTILE_OP, "cpu_op", 100.0, 300.0), x(CMD_OP, "cpu_op", 1100.0, 100.0)]
    return write_trace(folder / "rank0.json", trace_doc(0, 1, events))


def _column(path, name):
    return [row[name] for row in csv.DictReader(path.open(newline=""))]


def test_analyze_tables_csv_writes_formula_names_as_text(tmp_path):
    _hostile_trace(tmp_path / "run")
    out = tmp_path / "tables"
    assert main(["analyze", str(tmp_path / "run"), "--no-cache", "-o", str(tmp_path / "a.txt"),
                 "--tables", str(out)]) == 0
    assert "'" + LINK in _column(out / "top_kernels.csv", "name")
    ops = _column(out / "top_ops.csv", "name")
    assert "'" + HOSTILE_OP in ops and "'" + CMD_OP in ops
    assert not any(cell.startswith(("=", "+", "@")) for cell in ops)
    # Parquet is data for a program: the names as the trace has them
    assert main(["analyze", str(tmp_path / "run"), "--no-cache", "-o", str(tmp_path / "b.txt"),
                 "--tables", str(tmp_path / "pq"), "--tables-format", "parquet"]) == 0
    names = pq.read_table(tmp_path / "pq" / "top_ops.parquet").column("name").to_pylist()
    assert HOSTILE_OP in names and CMD_OP in names


def test_numbers_stay_numbers_and_only_text_that_starts_a_formula_changes():
    frame = pd.DataFrame({
        "name": ["-x", "\tpad", "-3", "+1.5e-3", "a=b", "@", None],
        "delta_ns": [-5, 0, 7, -1, 2, 3, 4],
        "share": [-0.25, 0.5, float("nan"), 1.0, -1e-9, 0.0, 2.0],
    })
    files = table_files(SimpleNamespace(tables={"t": frame}, run={}), "csv")
    assert files["t.csv"].decode().splitlines() == [
        "name,delta_ns,share", "'-x,-5,-0.25", "'\tpad,0,0.5", "-3,7,", "+1.5e-3,-1,1.0",
        "a=b,2,-1e-09", "'@,3,0.0", ",4,2.0"]


def test_a_carriage_return_cannot_start_a_row_of_its_own():
    """A spreadsheet ends a row at a bare carriage return: a name holding one is quoted
    whole, so the text after it (a formula) stays inside its cell."""
    frame = pd.DataFrame({"name": ["\rcr", "x\r=1+1", "plain"], "delta_ns": [-5, 1, 2]})
    text = table_files(SimpleNamespace(tables={"t": frame}, run={}), "csv")["t.csv"].decode()
    assert list(csv.reader(io.StringIO(text, newline=""))) == [
        ["name", "delta_ns"], ["'\rcr", "-5"], ["x\r=1+1", "1"], ["plain", "2"]]
    assert text.endswith("\n\"plain\",2\n")  # the number not quoted: still a number
