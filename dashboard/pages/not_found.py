"""The page for any URL that names no page."""

from __future__ import annotations

import dash
from dash import dcc, html
from profkit.dashboard import ids


def layout(**_query) -> html.Div:
    return html.Div(id=ids.NOT_FOUND, className="card notfound", children=[
        html.H2("Page not found"),
        html.P("This address names no page of the dashboard."),
        dcc.Link("Back to the runs", href="/"),
    ])


def register(app, results) -> None:
    dash.register_page("not_found_404", path="/404", name="Not found", layout=layout)
