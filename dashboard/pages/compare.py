"""Compare: pick two runs, see whether the change helped: the diff verdict (the same as
``profkit diff``, from :mod:`profkit.analyzers.compare`: improved, regressed, unchanged, or
not comparable with its reasons; its warnings: a side missing ranks, other GPUs or world
size, kernels or CPU ops that barely overlap), what it measured of how alike the runs are,
step time by part (base vs new) and the kernels and ops that moved most.

No pair is picked for the user. The URL carries the pair (``/compare?base=KEY&new=KEY``) and
follows the dropdowns, so a link reproduces the view: picking a run changes the URL, and
the page is drawn from the URL.
"""

from __future__ import annotations

from urllib.parse import urlencode

import dash
import pandas as pd
from dash import Input, Output, dcc, html
from profkit.dashboard import ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.pages import frame
from profkit.dashboard.ui import components as C

from profkit.classify.names import short_kernel_names

# verdict -> badge style (a class name: no spaces)
VERDICT_KINDS = {"improved": "improved", "regressed": "regressed", "unchanged": "unchanged",
                 "not comparable": "not-comparable"}
PICK = "Pick the run before the change (base) and the run after it (new)."
SHOWN = {"base_ms": "base (ms/step/rank)", "new_ms": "new (ms/step/rank)",
         "delta_ms": "change (ms/step/rank)"}  # the diff's tables: per step and rank


def delta_rows(table: pd.DataFrame, what: str) -> list[dict]:
    if table.empty:
        return []
    t = table.rename(columns={"name": what}).round(4)
    return t.to_dict("records")


def compare_search(base: str | None, new: str | None) -> str:
    """The URL query of a pair (either may be unset)."""
    query = urlencode({k: v for k, v in (("base", base), ("new", new)) if v})
    return f"?{query}" if query else ""


def diff_view(results, base: str | None, new: str | None) -> tuple:
    """(verdict children, parts figure, kernel rows, op rows) for two run keys; the reason
    in place of the verdict when a run cannot be read or compared."""
    if results.registry.get(base) is None or results.registry.get(new) is None:
        return html.P(PICK, className="muted"), F.empty_figure("pick two runs"), [], []
    return frame.attempt("the diff", lambda: _diff_parts(results.diff(base, new)),
                     lambda why: (html.Pre(why, className="error"), F.empty_figure("no diff"),
                                  [], []))


def _notes(items: list[str], class_name: str) -> html.Ul | None:
    return html.Ul([html.Li(t) for t in items], className=class_name) if items else None


def likeness(evidence: dict | None) -> str | None:
    """What the diff measured of how alike the two runs are (its ``evidence``), in words:
    the facts behind its reasons and warnings, for a reader to judge the ones under the
    thresholds too."""
    ev = evidence or {}
    facts = []
    if ev.get("kernel_overlap") is not None:
        facts.append(f"{ev['kernel_overlap']:.0%} of GPU time in kernels both ran")
    if ev.get("op_overlap") is not None:
        facts.append(f"{ev['op_overlap']:.0%} overlap of CPU op calls per step")
    devices = ev.get("devices") or []
    if len(devices) == 2 and all(devices):
        facts.append("GPUs " + " vs ".join(", ".join(d) for d in devices))
    world = ev.get("world_size") or []
    if len(world) == 2 and None not in world:
        facts.append(f"world size {world[0]} vs {world[1]}")
    return "How alike: " + "; ".join(facts) if facts else None


def _diff_parts(d) -> tuple:
    v = d.verdict
    alike = likeness(v.get("evidence"))
    verdict = [C.badge(v.get("verdict"), VERDICT_KINDS.get(v.get("verdict"))),
               html.P(v.get("headline", v.get("summary", "")), className="summary"),
               _notes([f"warning: {w}" for w in v.get("warnings", [])], "diff-warnings"),
               _notes(v.get("changes", []), "diff-changes"),
               html.P(v["memory"]["text"], className="hint diff-memory")
               if v.get("memory") else None,
               html.P("Inference: " + v["phases"]["text"], className="hint diff-phases")
               if (v.get("phases") or {}).get("text") else None,
               html.P(alike, className="hint diff-alike") if alike else None]
    return ([c for c in verdict if c is not None],
            F.diff_parts_bars(d.tables.get("diff_parts", pd.DataFrame())),
            delta_rows(d.tables.get("diff_kernels", pd.DataFrame()), "kernel"),
            delta_rows(d.tables.get("diff_ops", pd.DataFrame()), "op"))


def _table(table_id: str, what: str, rows: list[dict]) -> html.Div:
    """The kernels or ops that moved: base, new and change per step and rank (ms), names
    short with the full one on hover, the change coloured (slower red, faster green)."""
    frame = pd.DataFrame(rows, columns=[what, *SHOWN]).astype({c: float for c in SHOWN})
    full = None
    if what == "kernel" and len(frame):  # short names, the full one on hover
        full = {what: frame[what].astype(str).tolist()}
        frame[what] = short_kernel_names(full[what])
    return C.data_table(table_id, frame, page_size=10, full=full, headers=SHOWN,
                        deltas=("delta_ms",))


def _picker(label: str, picker_id: str, options: list[dict], value: str | None,
            placeholder: str) -> html.Label:
    return html.Label([label, dcc.Dropdown(id=picker_id, options=options, value=value,
                                           placeholder=placeholder, className="dropdown wide")])


def layout(results, base: str | None = None, new: str | None = None) -> html.Div:
    entries = results.registry.entries()
    options = [{"label": e.label, "value": e.key} for e in entries]
    keys = {e.key for e in entries}
    # never a default pair; a query may repeat a name (a list) or name no run
    base, new = (k if isinstance(k, str) and k in keys else None for k in (base, new))
    verdict, parts, kernels, ops = diff_view(results, base, new)
    pickers = html.Div(className="controls", children=[
        _picker("base", ids.CMP_BASE, options, base, "the run before the change"),
        html.Span("→", className="arrow"),
        _picker("new", ids.CMP_NEW, options, new, "the run after the change"),
    ])
    return html.Div([
        html.Div(className="pagehead", children=[html.H1("Compare runs"), pickers]),
        html.Div(className="grid two", children=[
            C.card("Did it help?", html.Div(verdict, id=ids.CMP_VERDICT, className="verdict")),
            C.card(None, C.graph(ids.CMP_PARTS, parts)),
        ]),
        # one under the other: four columns whose headers fit, and room for the names
        C.card("Kernels that moved", _table(ids.CMP_KERNELS, "kernel", kernels)),
        C.card("Ops that moved", _table(ids.CMP_OPS, "op", ops)),
    ])


def register(app, results) -> None:
    dash.register_page(__name__, path="/compare", name="Compare", title="profkit: compare",
                       layout=lambda base=None, new=None, **_q: layout(results, base, new))

    @app.callback(Output(ids.URL, "search"), Input(ids.CMP_BASE, "value"),
                  Input(ids.CMP_NEW, "value"), prevent_initial_call=True)
    def follow(base, new):
        """The URL follows the dropdowns; the page is then drawn from the URL."""
        return compare_search(*(k if results.registry.get(k) else None for k in (base, new)))
