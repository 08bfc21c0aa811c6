"""Compare: pick two runs, see whether the change helped: the diff verdict, step time by part
(base vs new) and the kernels and ops that moved most."""

from __future__ import annotations

import dash
import pandas as pd
from dash import Input, Output, dcc, html
from dash.exceptions import PreventUpdate
from profkit.dashboard import components as C
from profkit.dashboard import figures as F
from profkit.dashboard import ids

VERDICT_KINDS = {"improved": "improved", "regressed": "regressed", "unchanged": "unchanged"}


def delta_rows(table: pd.DataFrame, what: str) -> list[dict]:
    if table.empty:
        return []
    t = table.rename(columns={"name": what}).round(4)
    return t.to_dict("records")


def diff_view(results, base: str | None, new: str | None) -> tuple:
    """(verdict children, parts figure, kernel rows, op rows) for two run keys; the reason
    in place of the verdict when a run cannot be read or compared."""
    if results.registry.get(base) is None or results.registry.get(new) is None:
        msg = html.P("Pick two runs.", className="muted")
        return msg, F.empty_figure("pick two runs"), [], []
    return C.attempt("the diff", lambda: _diff_parts(results.diff(base, new)),
                     lambda why: (html.Pre(why, className="error"), F.empty_figure("no diff"),
                                  [], []))


def _diff_parts(d) -> tuple:
    v = d.verdict
    verdict = [C.badge(v.get("verdict"), VERDICT_KINDS.get(v.get("verdict"))),
               html.P(v.get("summary", ""), className="summary")]
    return (verdict, F.diff_parts_bars(d.tables.get("diff_parts", pd.DataFrame())),
            delta_rows(d.tables.get("diff_kernels", pd.DataFrame()), "kernel"),
            delta_rows(d.tables.get("diff_ops", pd.DataFrame()), "op"))


def _table(table_id: str, what: str, rows: list[dict]):
    cols = pd.DataFrame(columns=[what, "base_ms", "new_ms", "delta_ms"])
    cols = cols.astype({c: float for c in ("base_ms", "new_ms", "delta_ms")})
    table = C.data_table(table_id, cols, page_size=10)
    table.data = rows
    return table


def layout(results, base: str | None = None, new: str | None = None) -> html.Div:
    entries = results.registry.entries()
    options = [{"label": e.label, "value": e.key} for e in entries]
    keys = [e.key for e in entries]
    base = base if base in keys else (keys[0] if keys else None)
    new = new if new in keys else (keys[1] if len(keys) > 1 else base)
    verdict, parts, kernels, ops = diff_view(results, base, new)
    pickers = html.Div(className="controls", children=[
        html.Label(["base", dcc.Dropdown(id=ids.CMP_BASE, options=options, value=base,
                                         clearable=False, className="dropdown wide")]),
        html.Span("→", className="arrow"),
        html.Label(["new", dcc.Dropdown(id=ids.CMP_NEW, options=options, value=new,
                                        clearable=False, className="dropdown wide")]),
    ])
    return html.Div([
        html.Div(className="pagehead", children=[html.H1("Compare runs"), pickers]),
        html.Div(className="grid two", children=[
            C.card("Did it help?", html.Div(verdict, id=ids.CMP_VERDICT, className="verdict")),
            C.card(None, C.graph(ids.CMP_PARTS, parts)),
        ]),
        html.Div(className="grid two", children=[
            C.card("Kernels that moved", _table(ids.CMP_KERNELS, "kernel", kernels)),
            C.card("Ops that moved", _table(ids.CMP_OPS, "op", ops)),
        ]),
    ])


def register(app, results) -> None:
    dash.register_page(__name__, path="/compare", name="Compare", title="profkit: compare",
                       order=6, layout=lambda base=None, new=None, **_q: layout(results, base, new))

    @app.callback(Output(ids.CMP_VERDICT, "children"), Output(ids.CMP_PARTS, "figure"),
                  Output(ids.CMP_KERNELS, "data"), Output(ids.CMP_OPS, "data"),
                  Input(ids.CMP_BASE, "value"), Input(ids.CMP_NEW, "value"),
                  prevent_initial_call=True)
    def compare(base, new):
        if not base or not new:
            raise PreventUpdate
        return diff_view(results, base, new)
