"""Overview: the verdict with its evidence and recommendations first, then the per-rank step
breakdown, the rank x step heatmap and the straggler. Clicking a rank (bar or heatmap cell)
shows that rank's steps."""

from __future__ import annotations

import re

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import PreventUpdate
from profkit.analyzers import units as U
from profkit.analyzers.analyze import part_name
from profkit.analyzers.report import headline as HL
from profkit.analyzers.report.evidence import evidence_text
from profkit.analyzers.report.render import sorted_findings
from profkit.analyzers.report.render_text import finding_evidence, grouped_findings, saving_text
from profkit.dashboard import colors, ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.pages import frame, inference, memory
from profkit.dashboard.timeline.links import finding_has_place, finding_link
from profkit.dashboard.ui import banner
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import tables as T

SHOWN_FINDINGS = 6  # the rest fold under "more findings"
_RANK_RE = re.compile(r"rank (\d{1,9})")  # ranks of real jobs; int() of 5,000 digits raises

TAB = frame.RunTab("", "Overview", "overview")


def verdict_card(a) -> html.Section:
    v = a.verdict
    chips = [html.Span([html.I(className="dot", style={"backgroundColor": colors.PART_COLORS[p]}),
                        f"{part_name(p)} {frac:.0%}"], className="chip")
             for p, frac in sorted((v.get("fractions") or {}).items(), key=lambda x: -x[1])
             if frac >= 0.005]
    win, together = HL.win_text(a), HL.combined_text(a)
    return C.card("Verdict", html.Div(
        [html.Strong("Biggest win: "), win], id=ids.BIGGEST_WIN, className="biggest-win")
        if win else None,
        html.Div(id=ids.VERDICT, className="verdict", children=[
            C.verdict_badge(v.get("primary")), html.P(HL.verdict_text(a), className="summary")]),
        html.Div(chips, className="chips"),
        html.P(together[0].upper() + together[1:] + ".", id=ids.COMBINED_SAVING,
               className="combined-saving muted") if together else None,
        class_name="verdict-card")


def facts_card(a) -> html.Section:
    """Run-level numbers at a glance: ranks, steps, median step, MFU."""
    ranks, eff = a.table("rank_breakdown"), a.table("efficiency")
    facts = {"ranks": banner.ranks_text(a.run), "steps per rank": int(ranks["steps"].max()) if len(ranks) else 0,
             "median step": C.median_step_text(a)}
    if not eff.empty and eff["mfu"].notna().any():
        # no verdict (every step compiles, say): no step is the model's steady state
        facts["MFU"] = U.pct(eff["mfu"].mean()) if a.verdict.get("primary") else U.MISSING
    if not eff.empty and eff["gpu_util"].notna().any():
        facts["GPU busy"] = f"{eff['gpu_util'].mean():.0%}"
    return C.card(None, html.Div([html.Div([html.Div(str(v), className="stat-value"),
                                            html.Div(k, className="stat-label")], className="stat")
                                  for k, v in facts.items()], className="stats"))


def straggler_card(a) -> html.Section | None:
    if not a.stragglers:
        return None
    found = {f.rank: f for f in a.findings if f.category == "straggler"}
    items = [html.Div([html.Strong(f"rank {s['rank']} is a straggler"),
                       html.P(_straggler_words(s, found.get(s["rank"])), className="evidence")])
             for s in a.stragglers]
    return C.card("Straggler", *items, class_name="callout", id=ids.STRAGGLER_CALLOUT)


def _straggler_words(row: dict, finding) -> str:
    """The straggler finding's own sentence and saving where there is one (its p-value and
    whether the evidence is weak included: one figure, one value), else the row's numbers."""
    if finding is not None:
        return finding.message + saving_text(finding)
    return evidence_text("straggler_row", row.get("evidence"))


def finding_item(f, run_key: str, timeline_href: str | None = None, others: str = "") -> html.Li:
    """One finding: what, where (``others``: the ranks whose finding of the same kind folds
    into it, "1-3", as the text report says them), the evidence in units, the estimated
    saving, what to change, a link to the table its evidence comes from and, when it has a
    place in time, to the timeline there."""
    also = f"(similar on {'rank' if others.isdigit() else 'ranks'} {others})" if others else ""
    where = " ".join(x for x in (f"rank {f.rank}" if f.rank is not None else "",
                                 f"step {f.step}" if f.step is not None else "", also) if x)
    evidence = {k: v for k, v in (f.evidence or {}).items() if not isinstance(v, (dict, list))}
    cited = T.cited_table(f.category)
    return html.Li(className=f"finding sev-{f.severity}", children=[
        html.Div([html.Span(f.severity, className=f"sev sev-{f.severity}"),
                  html.Span(part_name(f.category), className="cat"),
                  html.Span(where, className="muted")]),
        html.P(f.message + saving_text(f)),
        # none where the message says it all (the straggler's: one figure, one value)
        html.P(finding_evidence(f), className="evidence") if finding_evidence(f) else None,
        html.P(["→ ", f.recommendation], className="rec") if f.recommendation else None,
        dcc.Link(f"see {cited.title.split(':')[0].lower()} →", className="cites",
                 href=C.run_href(run_key, "tables") + f"#{T.anchor(cited.name)}")
        if cited else None,
        html.A("see it on the timeline", href=timeline_href, className="tl-link")
        if timeline_href else None,
        html.Details([html.Summary("all evidence"), C.kv_list(evidence)]) if evidence else None,
    ])


def findings_card(a, run_key: str) -> html.Section:
    """The findings as the text report lists them: one per kind, the other ranks with the
    same finding folded into the first (render_text.grouped_findings)."""
    at = {id(f): i for i, f in enumerate(sorted_findings(a))}  # the timeline's finding index
    # the timeline opens a finding's window itself (it loads the run; this page need not)
    items = [finding_item(f, run_key, finding_link(run_key, at[id(f)])
                          if finding_has_place(a, f) else None, others)
             for f, others in grouped_findings(a)]
    shown, rest = items[:SHOWN_FINDINGS], items[SHOWN_FINDINGS:]
    more = html.Details([html.Summary(f"{len(rest)} more findings"), html.Ul(rest)]) if rest else None
    return C.card("Evidence & recommendations", html.Ul(shown, className="findings"), more,
                  id=ids.FINDINGS)


def default_rank(a) -> int | None:
    if a.stragglers:
        return int(a.stragglers[0]["rank"])
    ranks = a.table("rank_breakdown")
    return int(ranks["rank"].iloc[0]) if not ranks.empty else None


def body(a, run_key: str) -> list:
    """The overview's panels, each drawn on its own (one that fails leaves the others). The
    verdict, facts and findings come with the page; the charts follow in a second request
    (:func:`charts`), so that the verdict is on screen without waiting for them."""
    return [
        html.Div(className="grid two", children=[
            html.Div([frame.panel("Verdict", lambda: verdict_card(a)),
                      frame.panel("Straggler", lambda: straggler_card(a)),
                      frame.panel("Run facts", lambda: facts_card(a)),
                      frame.panel("Inference", lambda: inference.inference_tile(a)),
                      frame.panel("Peak memory", lambda: memory.peak_tile(a))]),
            frame.panel("Evidence & recommendations", lambda: findings_card(a, run_key))]),
        html.Div(className="grid two", children=[
            C.card(None, _slot(ids.RANK_BARS_SLOT), C.legend(F.part_legend(a.table("rank_breakdown"))),
                   html.P(["Click a rank to see its steps. ", dcc.Link(
                       "The breakdown as a table →", id=ids.RANK_TABLE_LINK,
                       href=C.run_href(run_key, "tables") + f"#{T.anchor('rank_breakdown')}")
                       if len(a.table("rank_breakdown")) else None], className="hint")),
            C.card(None, _slot(ids.STEP_HEATMAP_SLOT)),
        ]),
        C.card(None, _slot(ids.RANK_DETAIL_SLOT), C.legend(F.part_legend(a.table("rank_breakdown")))),
        dcc.Store(id=ids.SELECTED_RANK, data=default_rank(a)),
        dcc.Store(id=ids.OVERVIEW_CHARTS, data={"run": run_key}),
    ]


def _slot(slot_id: str) -> html.Div:
    """Where a chart goes when it arrives: as high as the chart, so nothing jumps."""
    return html.Div(id=slot_id, className="chart-slot",
                    children=html.P("drawing the chart...", className="muted chart-pending"))


def verdict_ranks(a) -> list[int]:
    """The ranks whose used steps the verdict counts: none when there is no verdict (every
    profiled step compiles, say), else the ranks of the rank breakdown (a rank whose steps
    all compile is left out of it)."""
    if a.verdict.get("primary") is None:
        return []
    return [int(r) for r in a.table("rank_breakdown")["rank"]]


def charts(a) -> tuple:
    """The overview's three charts (the slots' children): the per-rank step breakdown, the
    rank x step heatmap and the steps of the default rank, each drawn on its own."""
    stragglers = [int(s["rank"]) for s in a.stragglers]
    steps = a.table("step_breakdown")
    rank = default_rank(a)
    return (
        frame.panel("Step breakdown per rank", lambda: C.loading(C.graph(
            ids.RANK_BARS, F.breakdown_bars(a.table("rank_breakdown"), stragglers, rank)))),
        frame.panel("Step time, rank x step", lambda: C.graph(ids.STEP_HEATMAP,
                                                           F.step_heatmap(steps, verdict_ranks(a)))),
        frame.panel("Steps of one rank", lambda: C.loading(C.graph(
            ids.RANK_DETAIL, F.rank_steps_bars(steps, rank) if rank is not None
            else F.empty_figure("no ranks")))),
    )


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB, lambda _run, a: body(a, run_key),
                      needs_run=False, keep=True)


def clicked_rank(click) -> int | None:
    """The rank a click on a rank bar ("rank N" on x) or heatmap cell (on y) points at;
    None for anything else."""
    points = click.get("points") if isinstance(click, dict) else None
    for point in points if isinstance(points, list) else []:
        for axis in ("x", "y"):
            label = point.get(axis) if isinstance(point, dict) else None
            m = _RANK_RE.fullmatch(label) if isinstance(label, str) else None
            if m:
                return int(m.group(1))
    return None


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)

    @app.callback(Output(ids.RANK_BARS_SLOT, "children"), Output(ids.STEP_HEATMAP_SLOT, "children"),
                  Output(ids.RANK_DETAIL_SLOT, "children"), Input(ids.OVERVIEW_CHARTS, "data"))
    def fill_charts(store):
        key = frame.stored_run(results, store)
        # drawn once per version of the run's files, like the page itself
        return frame.attempt("the charts", lambda: results.page(
            "overview-charts", key, lambda: charts(results.analysis(key))),
            lambda why: (html.P(f"could not be drawn: {why}", className="error"),) * 3)

    @app.callback(Output(ids.SELECTED_RANK, "data"), Input(ids.RANK_BARS, "clickData"),
                  Input(ids.STEP_HEATMAP, "clickData"), prevent_initial_call=True)
    def select_rank(bar_click, cell_click):
        trigger = dash.ctx.triggered_id
        rank = clicked_rank(bar_click if trigger == ids.RANK_BARS else cell_click)
        return dash.no_update if rank is None else rank

    @app.callback(Output(ids.RANK_DETAIL, "figure"), Output(ids.RANK_BARS, "figure"),
                  Input(ids.SELECTED_RANK, "data"), State(ids.RUN_STORE, "data"),
                  prevent_initial_call=True)
    def show_rank(rank, store):
        key = frame.stored_run(results, store)
        a = results.analysis(key)
        if rank not in a.run["ranks_analyzed"]:
            raise PreventUpdate
        stragglers = [int(s["rank"]) for s in a.stragglers]
        return frame.attempt(f"rank {rank}'s steps", lambda: (
            F.rank_steps_bars(a.table("step_breakdown"), rank),
            F.breakdown_bars(a.table("rank_breakdown"), stragglers, rank)),
            lambda why: (F.empty_figure(f"could not be drawn: {why}"), dash.no_update))
