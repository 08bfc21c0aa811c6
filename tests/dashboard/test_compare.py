"""The Compare page without a browser: what the diff measured of how alike two runs are,
in words, and the tables that moved as grids."""

from profkit.dashboard.pages import compare as P
from profkit.dashboard.ui import grids as G


def test_likeness_says_what_the_diff_measured():
    evidence = {"kernel_overlap": 0.4012, "op_overlap": 0.49, "trains": [True, True],
                "devices": [["NVIDIA H100"], ["NVIDIA H200"]], "world_size": [4, 4],
                "ranks_missing": [[], [3]]}
    assert P.likeness(evidence) == (
        "How alike: 40% of GPU time in kernels both ran; 49% overlap of CPU op calls per "
        "step; GPUs NVIDIA H100 vs NVIDIA H200; world size 4 vs 4")
    assert P.likeness({"kernel_overlap": None, "devices": [[], []]}) is None
    assert P.likeness(None) is None


def test_moved_tables_name_units_and_colour_the_change():
    rows = [{"kernel": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "base_ms": 1.0,
             "new_ms": 3.0, "delta_ms": 2.0}]
    grid = G.grid_in(P._table("cmp-kernels", "kernel", rows))
    headers = {c["field"]: c["headerName"] for c in grid.columnDefs}
    assert headers["delta_ms"] == "change (ms/step/rank)"
    change = next(c for c in grid.columnDefs if c["field"] == "delta_ms")
    assert change["cellStyle"] == G.DELTA_STYLE
    assert grid.rowData[0]["kernel"] == "nccl AllReduce f32 RING LL"
    assert grid.rowData[0][G.FULL + "kernel"] == rows[0]["kernel"]
    empty = G.grid_in(P._table("cmp-ops", "op", []))
    assert empty.rowData == [] and [c["field"] for c in empty.columnDefs] == [
        "op", "base_ms", "new_ms", "delta_ms"]
