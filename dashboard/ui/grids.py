"""Tables as AG Grid (``dash-ag-grid``): every column sortable (click its header) and
filterable (a box under each header: numbers by value, with the comparisons in the filter
menu; text by substring, any case), pages of rows, and a CSV export of the rows as
filtered and sorted, made in the browser (``assets/grids.js``). Shortened text (kernel
names) keeps its full form for hover.

Pure builders: a frame in, components out, so that the pages' callbacks send the same rows
(:func:`records`) as the layouts.
"""

from __future__ import annotations

import math

import dash_ag_grid as dag
import pandas as pd
from dash import html

FULL = "__full__"  # prefix of the hidden row fields holding a shortened column's full text
CSV_ATTR = "data-csv-grid"  # the export button's attribute naming its grid (assets/grids.js)
WIDE = 3  # flex weight of long text columns (names, code) against 1 for numbers and words
LONG_TEXT = 24  # characters: text columns with longer values are the wide ones
# least widths (px) of a column: a number ("12345.678") and a word fit, headers wrap; at these
# the 16 columns of the NVML table fit a 1280 px window (at 112 px each, the last columns
# fell past the card's edge, behind a scrollbar that overlay scrollbars do not show)
MIN_NUMBER_PX, MIN_TEXT_PX, MIN_WIDE_PX = 72, 88, 200
# a header wraps between words, never inside one: a column is at least as wide as its
# header's longest word (12 px semibold: up to ~8 px a character, "communication" 103 px in
# chromium) and the cell's padding, so that "(ms/step/rank)" is not cut to "(ms/step/r..."
# (the Compare page), as far as the table's columns still fit a full-width card of a 1400 px
# window (the NVML table's 16 at their least widths nearly fill it)
HEADER_CHAR_PX, HEADER_PAD_PX, FULL_CARD_PX = 8.0, 14, 1300
# A change column (a diff's ``delta_ms``): slower red, faster green.
DELTA_STYLE = {"styleConditions": [
    {"condition": "params.value > 0", "style": {"color": "#dc2626"}},
    {"condition": "params.value < 0", "style": {"color": "#16a34a"}},
]}
GRID_OPTIONS = {
    "domLayout": "autoHeight", "tooltipShowDelay": 250,
    "enableCellTextSelection": True, "ensureDomOrder": True,
    # every column in the page (tests and find-in-page see them); tables are narrow enough
    "suppressColumnVirtualisation": True,
    # column names such as "size (MB)" are fields, not paths into nested objects
    "suppressFieldDotNotation": True,
}


def _cell(value):
    """A JSON value a grid cell shows: floats rounded, NaN and infinities blank, booleans
    as the words the tables have always shown."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        # three decimals, but a small value keeps three significant digits (a p-value of
        # 8.4e-09 is not 0)
        return round(value, 3) if value == 0 or abs(value) >= 1e-3 else float(f"{value:.3g}")
    return value


def records(frame: pd.DataFrame, full: dict[str, list[str]] | None = None) -> list[dict]:
    """The grid's rows of ``frame``; ``full``: the full text of shortened columns, kept in
    hidden fields for hover."""
    rows = [{k: _cell(v) for k, v in row.items()} for row in frame.to_dict("records")]
    for column, values in (full or {}).items():
        for row, text in zip(rows, values):
            row[FULL + column] = text
    return rows


def column_defs(frame: pd.DataFrame, *, headers: dict[str, str] | None = None,
                full: dict[str, list[str]] | None = None, sort: dict[str, str] | None = None,
                deltas: tuple[str, ...] = ()) -> list[dict]:
    """One column per frame column: its field, header (``headers`` or the name), a number
    or text filter by its type, its initial ``sort`` ("asc"/"desc"), its hover text."""
    out = []
    for name in frame.columns:
        numeric = pd.api.types.is_numeric_dtype(frame[name]) and \
            not pd.api.types.is_bool_dtype(frame[name])
        wide = not numeric and frame[name].astype(str).str.len().max() > LONG_TEXT
        header = (headers or {}).get(name, name)
        col = {"field": name, "headerName": header, "headerTooltip": header,
               "filter": "agNumberColumnFilter" if numeric else "agTextColumnFilter",
               "flex": WIDE if wide else 1,
               "minWidth": MIN_WIDE_PX if wide else MIN_NUMBER_PX if numeric else MIN_TEXT_PX}
        if numeric:
            col["type"] = "numericColumn"
        if name in (full or {}):
            col["tooltipField"] = FULL + name
        if name in (sort or {}):
            col["sort"] = sort[name]
        if name in deltas:
            col["cellStyle"] = DELTA_STYLE
        out.append(col)
    spare = FULL_CARD_PX - sum(c["minWidth"] for c in out)
    for col in sorted(out, key=lambda c: header_px(c["headerName"]) - c["minWidth"]):
        more = header_px(col["headerName"]) - col["minWidth"]
        if 0 < more <= spare:  # the narrowest wants first: the most headers whole
            col["minWidth"] += more
            spare -= more
    return out


def header_px(header: str) -> int:
    """The least width (px) at which ``header``'s longest word fits its header cell."""
    longest = max((len(word) for word in str(header).split()), default=0)
    return math.ceil(longest * HEADER_CHAR_PX) + HEADER_PAD_PX


def grid(grid_id: str, frame: pd.DataFrame, *, page_size: int = 12,
         full: dict[str, list[str]] | None = None, headers: dict[str, str] | None = None,
         sort: dict[str, str] | None = None, deltas: tuple[str, ...] = ()) -> dag.AgGrid:
    """The grid of ``frame`` (see the module doc and :func:`column_defs`)."""
    return dag.AgGrid(
        id=grid_id, rowData=records(frame, full),
        columnDefs=column_defs(frame, headers=headers, full=full, sort=sort, deltas=deltas),
        defaultColDef={"sortable": True, "filter": True, "floatingFilter": True,
                       "resizable": True, "wrapHeaderText": True, "autoHeaderHeight": True,
                       "cellDataType": False,  # no checkbox or date guessed from values
                       "filterParams": {"buttons": ["reset"], "maxNumConditions": 1}},
        dashGridOptions={**GRID_OPTIONS, **_pages(len(frame), page_size)},
        csvExportParams={"fileName": f"{grid_id}.csv"}, className="profkit-grid",
        style={"width": "100%"})


def _pages(rows: int, page_size: int) -> dict:
    """Pages of ``page_size`` rows with a choice of larger pages; none for a table that
    fits on one (no page bar under two rows)."""
    if rows <= page_size:
        return {"pagination": False}
    return {"pagination": True, "paginationPageSize": page_size,
            "paginationPageSizeSelector": sorted({page_size, 50, 200})}


def export_button(grid_id: str) -> html.Button:
    """The CSV button of a grid: the rows as filtered and sorted, headers as shown."""
    return html.Button("Export CSV", className="export", title="download these rows as CSV",
                       **{CSV_ATTR: grid_id})


def table(grid_id: str, frame: pd.DataFrame, **kwargs) -> html.Div:
    """:func:`grid` with its CSV button above it."""
    return html.Div([export_button(grid_id), grid(grid_id, frame, **kwargs)],
                    className="grid-table")


def grid_in(component) -> dag.AgGrid | None:
    """The grid inside a component built by :func:`table` (or the grid itself)."""
    if isinstance(component, dag.AgGrid):
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        found = grid_in(child) if child is not None and not isinstance(child, str) else None
        if found is not None:
            return found
    return None
