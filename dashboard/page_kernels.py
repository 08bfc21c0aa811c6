"""Kernels & ops: the top kernels and CPU ops (sortable, filterable), short-kernel and launch
statistics. The class picker narrows the chart and the kernel table."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from profkit.dashboard import components as C
from profkit.dashboard import figures as F
from profkit.dashboard import ids

ALL = "all"


def kernel_rows(kernels: pd.DataFrame, cls: str = ALL) -> pd.DataFrame:
    """The top-kernels table in display units (ms / us / %), optionally one class."""
    k = kernels if cls == ALL else kernels[kernels["cls"] == cls]
    return pd.DataFrame({
        "kernel": k["name"], "class": k["cls"], "subclass": k["subcls"], "count": k["count"],
        "total_ms": k["total_ns"] / 1e6, "mean_us": k["mean_ns"] / 1e3, "share_%": k["share"] * 100,
        "rank_min_ms": k["rank_min_total_ns"] / 1e6, "rank_max_ms": k["rank_max_total_ns"] / 1e6,
    })


def op_rows(ops: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "op": ops["name"], "count": ops["count"], "self_ms": ops["self_ns"] / 1e6,
        "total_ms": ops["total_ns"] / 1e6, "mean_self_us": ops["mean_self_ns"] / 1e3,
        "self_share_%": ops["self_share"] * 100,
    })


def launch_rows(launches: pd.DataFrame) -> pd.DataFrame:
    if launches.empty:
        return launches
    cols = {"rank": "rank", "launch_calls": "launch calls", "launch_time_frac": "launch time frac",
            "launch_median_ns": "median launch ns", "delay_median_ns": "median queue delay ns",
            "max_queue_depth": "max queue depth", "graph_launches": "graph launches"}
    return launches[[c for c in cols if c in launches]].rename(columns=cols)


def layout(results, run_key: str = "") -> html.Div:
    return C.run_page(results, run_key, "kernels", lambda _run, a: body(a))


def classes_of(kernels: pd.DataFrame) -> list[str]:
    return sorted(kernels["cls"].dropna().unique()) if not kernels.empty else []


def _kernels_card(a) -> html.Section:
    kernels = a.table("top_kernels")
    picker = dcc.RadioItems(id=ids.K_CLASS, value=ALL, inline=True, className="radio",
                            options=[{"label": "all classes", "value": ALL}] +
                            [{"label": c, "value": c} for c in classes_of(kernels)])
    return C.card("Kernels", picker, C.graph(ids.K_CHART, F.kernel_bars(kernels)),
                  C.data_table(ids.K_KERNELS, kernel_rows(kernels),
                               sort_by=[{"column_id": "total_ms", "direction": "desc"}]))


def body(a) -> list:
    return [
        C.panel("Kernels", lambda: _kernels_card(a)),
        C.panel("CPU ops (self time)", lambda: C.card(
            "CPU ops (self time)", C.data_table(ids.K_OPS, op_rows(a.table("top_ops"))))),
        html.Div(className="grid two", children=[
            C.panel("Short kernels", lambda: C.card(
                "Short kernels", C.data_table(ids.K_SHORT, a.table("short_kernels")))),
            C.panel("Launches", lambda: C.card(
                "Launches", C.data_table(ids.K_LAUNCHES, launch_rows(a.table("launches"))))),
        ]),
    ]


def register(app, results) -> None:
    C.register_run_page(__name__, results, layout, tab="kernels", name="Kernels & ops",
                        title="kernels", order=3)

    @app.callback(Output(ids.K_CHART, "figure"), Output(ids.K_KERNELS, "data"),
                  Input(ids.K_CLASS, "value"), State(ids.RUN_STORE, "data"),
                  prevent_initial_call=True)
    def pick_class(cls, store):
        key = C.stored_run(results, store)
        kernels = results.analysis(key).table("top_kernels")
        if cls != ALL and cls not in classes_of(kernels):
            raise PreventUpdate
        chosen = kernels if cls == ALL else kernels[kernels["cls"] == cls]
        rows = C.data_table("tmp", kernel_rows(kernels, cls)).data
        return F.kernel_bars(chosen), rows
