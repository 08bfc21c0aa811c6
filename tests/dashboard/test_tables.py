"""The analysis tables as the dashboard shows them: units in the column names and the values
scaled to them, kernel names shortened with the full name kept for hover, every table a
finding cites reachable, every column a spec names present in real analyses."""

from pathlib import Path

import dash_ag_grid as dag
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import grids as G
from profkit.dashboard.ui import tables as T

from profkit.run import loader
from tests.dashboard.conftest import REPO
from tests.dashboard.test_loading import text_of

LONG = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
        "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#1}::operator()() const"
        "::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >"
        "(int, at::native::GeluCUDAKernelImpl, std::array<char*, 2ul>)")


def test_launch_times_read_in_microseconds_under_a_named_column():
    launches = pd.DataFrame({"rank": [0], "launch_calls": [1038], "delay_median_ns": [2459901],
                             "launch_time_frac": [0.25]})
    shown, full = T.readable(T.BY_NAME["launches"], launches)
    assert list(shown.columns) == ["rank", "launch calls", "launch calls (% of step)",
                                   "queue delay, median (us)"]
    assert shown["queue delay, median (us)"][0] == pytest.approx(2459.901)
    assert shown["launch calls (% of step)"][0] == pytest.approx(25.0)
    assert full == {}


def test_kernel_names_are_short_with_the_full_name_on_hover():
    kernels = pd.DataFrame({"name": [LONG, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)"],
                            "cls": ["compute", "communication"], "total_ns": [2e6, 1e6]})
    grid = G.grid_in(C.readable_table("t", T.KERNELS, kernels))
    names = [row["kernel"] for row in grid.rowData]
    assert "GeluCUDA" in names[0] and "TensorIteratorBase" not in names[0]
    assert [row["GPU time (ms)"] for row in grid.rowData] == [2.0, 1.0]
    assert [row["class"] for row in grid.rowData] == ["compute", "communication"]
    kernel = next(c for c in grid.columnDefs if c["field"] == "kernel")
    assert grid.rowData[0][kernel["tooltipField"]] == LONG


def test_tables_are_grids_that_sort_filter_and_export():
    """AG Grid, not the deprecated DataTable: every column sorts and has a filter box (by
    value for numbers), rows page, a CSV button names the grid; blanks for NaN, booleans
    as words, numbers rounded."""
    frame = pd.DataFrame({"rank": [0, 1], "straggler": [False, True],
                          "wait (ms)": [1.23456, float("nan")]})
    table = C.data_table("t-x", frame, page_size=5)
    grid = G.grid_in(table)
    assert isinstance(grid, dag.AgGrid) and grid.id == "t-x"
    assert grid.defaultColDef["sortable"] and grid.defaultColDef["floatingFilter"]
    filters = {c["field"]: c["filter"] for c in grid.columnDefs}
    assert filters == {"rank": "agNumberColumnFilter", "straggler": "agTextColumnFilter",
                       "wait (ms)": "agNumberColumnFilter"}
    assert grid.rowData == [{"rank": 0, "straggler": "false", "wait (ms)": 1.235},
                            {"rank": 1, "straggler": "true", "wait (ms)": None}]
    assert not grid.dashGridOptions["pagination"]  # two rows: one page, no page bar
    paged = G.grid("t-y", pd.DataFrame({"rank": range(7)}), page_size=5).dashGridOptions
    assert paged["pagination"] and paged["paginationPageSize"] == 5
    assert table.children[0].to_plotly_json()["props"][G.CSV_ATTR] == "t-x"
    dashboard = REPO / "dashboard"
    # no module mentions the DataTable's library, but for app.py's one name of it in
    # UNUSED_CHUNKS (which leaves its code unloaded)
    assert not [p.name for p in dashboard.glob("*.py")
                if "dash_table" in p.read_text().replace('"dash.dash_table": (', "", 1)]


def test_fusion_sequences_shorten_each_kernel():
    seq = T.SEQUENCE_SEP.join([LONG, LONG])
    shown, full = T.readable(T.BY_NAME["fusion_candidates"], pd.DataFrame({"sequence": [seq]}))
    first, second = shown["kernels in order"][0].split(" > ")
    assert first == second and "GeluCUDA" in first and len(first) < len(LONG) / 2
    assert full == {"kernels in order": [seq]}


def test_evidence_keys_read_in_their_units():
    text = text_of(C.kv_list({"others_wait_ns_per_step": 5.105e6, "wait_frac": 0.416,
                              "delay_median_ns": 2459901}))
    assert text == "others wait 5.11 ms/step wait 42% delay median 2.46 ms"


def test_every_cited_table_is_on_the_tables_page():
    names = [t.name for t in T.TABLES]
    for wanted in ("efficiency", "stream_breakdown", "compute_subclasses", "collectives",
                   "queue_depth", "fusion_candidates", "nvml", "transfers", "idle_code",
                   "shape_setup"):
        assert wanted in names
    assert set(T.CITED.values()) <= set(names)
    assert T.cited_table("straggler").name == "stragglers" and T.cited_table("nope") is None


@pytest.mark.parametrize("run", ["zoo/straggler", "profkit_ddp"])
def test_every_column_the_specs_name_is_in_a_real_analysis(run):
    a = analyze(loader.load_run(REPO / "samples" / "runs" / Path(run)))
    for spec in T.TABLES:
        frame = T.source(a, spec)
        if frame.empty:
            continue
        # the rank breakdown leaves out the optional parts no rank has time in, on purpose
        frame = a.table(spec.name) if spec.name == "rank_breakdown" else frame
        missing = [c for c, _, _ in spec.columns if c not in frame]
        assert missing == [], f"{spec.name}: {missing}"
    links = T.with_links(a)
    assert links["link_gbps"].notna().all()  # every collective against its link's peak


def test_the_inference_table_columns_are_in_an_inference_analysis():
    a = analyze(loader.load_run(REPO / "samples" / "runs" / "inference" / "kv_graph_b8"))
    spec = T.BY_NAME["inference_phases"]
    frame = T.source(a, spec)
    assert list(frame["phase"]) == ["prefill", "decode"]
    assert [c for c, _, _ in spec.columns if c not in frame] == []
    assert T.cited_table("decode_batch").name == "inference_phases"


def test_a_tiny_p_value_is_not_shown_as_zero():
    """The stragglers table's p value of 8.4e-09 once read 0 in the grid."""
    from profkit.dashboard.ui.grids import _cell

    assert _cell(8.4e-09) == 8.4e-09
    assert _cell(0.0123456) == 0.012 and _cell(1234.56789) == 1234.568 and _cell(0.0) == 0.0
    assert _cell(float("nan")) is None


def test_the_shape_setup_table_reads_in_ms_on_a_run_with_new_shapes():
    """varlen_default (a new sequence length every step): the Tables page's shape_setup rows
    name cuDNN's attention, its first call in ms and its repeat in us, as the table holds."""
    a = analyze(loader.load_run(REPO / "samples" / "runs" / "memory" / "varlen_default"))
    raw = a.table("shape_setup").set_index("name")
    shown, _ = T.readable(T.BY_NAME["shape_setup"], T.source(a, T.BY_NAME["shape_setup"]))
    row = shown.set_index("op").loc["aten::_cudnn_attention_forward"]
    want = raw.loc["aten::_cudnn_attention_forward"]
    assert row["first call (ms)"] == pytest.approx(want["first_ns"] / 1e6)
    assert row["repeat (us)"] == pytest.approx(want["repeat_ns"] / 1e3)
    assert row["first call (ms)"] > 10 and row["repeat (us)"] < 1000
