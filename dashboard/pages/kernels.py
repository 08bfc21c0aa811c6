"""Kernels & ops: the top kernels (short names, the full name on hover), their roofline,
the CPU ops, the launch statistics and short kernels; every table sortable, filterable and exportable. The
class picker narrows the chart and the kernel table."""

from __future__ import annotations

import pandas as pd
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from profkit.analyzers.analyze import part_name
from profkit.dashboard import ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.figures import roofline as R
from profkit.dashboard.pages import frame
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import grids as G
from profkit.dashboard.ui import tables as T

ALL = "all"

TAB = frame.RunTab("kernels", "Kernels & ops", "kernels")


def of_class(kernels: pd.DataFrame, cls: str = ALL) -> pd.DataFrame:
    return kernels if cls == ALL or kernels.empty else kernels[kernels["cls"] == cls]


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB, lambda _run, a: body(a), needs_run=False,
                      keep=True)


def classes_of(kernels: pd.DataFrame) -> list[str]:
    return sorted(kernels["cls"].dropna().unique()) if not kernels.empty else []


def _kernels_card(a) -> html.Section:
    kernels = a.table("top_kernels")
    picker = dcc.RadioItems(id=ids.K_CLASS, value=ALL, inline=True, className="radio",
                            options=[{"label": "all classes", "value": ALL}] +
                            [{"label": part_name(c), "value": c} for c in classes_of(kernels)])
    table = C.readable_table(ids.K_KERNELS, T.KERNELS, kernels, sort={"GPU time (ms)": "desc"})
    return C.card("Kernels", picker, C.loading(C.graph(ids.K_CHART, F.kernel_bars(kernels))),
                  C.loading(table))


def body(a) -> list:
    return [
        frame.panel("Kernels", lambda: _kernels_card(a)),
        frame.panel("Roofline", lambda: C.card("Roofline", C.graph(
            ids.K_ROOFLINE, R.roofline_figure(a.table("roofline"))))),
        frame.panel("CPU ops", lambda: C.table_card(ids.K_OPS, T.OPS, a.table("top_ops"))),
        frame.panel("Launches", lambda: C.table_card(ids.K_LAUNCHES, T.BY_NAME["launches"],
                                                a.table("launches"))),
        frame.panel("Short kernels", lambda: C.table_card(ids.K_SHORT, T.BY_NAME["short_kernels"],
                                                     a.table("short_kernels"))),
    ]


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)

    @app.callback(Output(ids.K_CHART, "figure"), Output(ids.K_KERNELS, "rowData"),
                  Input(ids.K_CLASS, "value"), State(ids.RUN_STORE, "data"),
                  prevent_initial_call=True)
    def pick_class(cls, store):
        key = frame.stored_run(results, store)
        kernels = results.analysis(key).table("top_kernels")
        if cls != ALL and cls not in classes_of(kernels):
            raise PreventUpdate
        chosen = of_class(kernels, cls)
        return F.kernel_bars(chosen), G.records(*T.readable(T.KERNELS, chosen))
