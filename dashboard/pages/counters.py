"""Counters: NVML / GPM time series per GPU, aligned with the profiled steps; periods with a
clock-throttle reason set are shaded red. The metric picker chooses the rows. A run without
NVML samples gets one line saying so, no empty chart or table."""

from __future__ import annotations

import numpy as np
import pandas as pd
from dash import Input, Output, State, dcc, html
from profkit.analyzers.measure.efficiency import THROTTLE_MASK
from profkit.dashboard import ids
from profkit.dashboard.figures import charts as F
from profkit.dashboard.pages import frame
from profkit.dashboard.pages.timeline import base_ns
from profkit.dashboard.ui import components as C
from profkit.dashboard.ui import tables as T

from profkit import schema as S

DEFAULT_METRICS = ("sm_clock_mhz", "power_w", "gpu_util_pct", "gpm_sm_active_pct",
                   "gpm_tensor_active_pct")
REASONS = "clocks_event_reasons"
NO_NVML = ("This run has no NVML samples: profkit.profile records them beside the traces "
           "(nvml/rank{R}.{C}.npz); stock torch.profiler traces have none.")

TAB = frame.RunTab("counters", "Counters", "counters")


def all_counters(run) -> pd.DataFrame:
    """Every rank's counters in one long table with a ``rank`` column."""
    frames = [d.counters.assign(rank=r) for r, d in run.ranks.items() if len(d.counters)]
    if not frames:
        return pd.DataFrame(columns=["ts_ns", "device", "metric", "value", "rank"])
    out = pd.concat(frames, ignore_index=True)
    out["metric"] = out["metric"].astype(str)
    return out


def throttle_periods(counters: pd.DataFrame) -> pd.DataFrame:
    """(rank, t0_ns, t1_ns) of samples with a throttle bit set, each lasting to the next
    sample of its rank."""
    c = counters[counters["metric"] == REASONS].sort_values(["rank", "ts_ns"])
    rows = []
    for rank, g in c.groupby("rank"):
        t = g["ts_ns"].to_numpy()
        bits = g["value"].to_numpy(dtype=float).astype(np.int64) & THROTTLE_MASK
        nxt = np.append(t[1:], t[-1] + (np.median(np.diff(t)) if len(t) > 1 else 0))
        rows += [(rank, a, b) for a, b, on in zip(t, nxt, bits != 0) if on]
    return pd.DataFrame(rows, columns=["rank", "t0_ns", "t1_ns"])


def all_steps(run) -> pd.DataFrame:
    frames = [d.steps for d in run.ranks.values() if len(d.steps)]
    if not frames:
        return pd.DataFrame(columns=["step", "ts_ns", "dur_ns", "gpu_ts_ns", "gpu_end_ns"])
    steps = pd.concat(frames)
    return steps.groupby("step", as_index=False).agg(
        ts_ns=("ts_ns", "min"), dur_ns=("dur_ns", "max"), gpu_ts_ns=("gpu_ts_ns", "min"),
        gpu_end_ns=("gpu_end_ns", "max"))


def figure(run, metrics: list[str]):
    counters = all_counters(run)
    return F.counters_figure(counters, metrics, all_steps(run), base_ns(run),
                             throttle_periods(counters))


def figure_or_error(run, metrics: list[str]):
    return frame.attempt("the counters", lambda: figure(run, metrics),
                     lambda why: F.empty_figure(f"could not be drawn: {why}"))


def layout(results, run_key: str = "") -> html.Div:
    return frame.run_page(results, run_key, TAB, lambda run, a: body(run, a), keep=True)


def body(run, a) -> list:
    """The counters and the NVML table; for a run without NVML samples, one line saying so
    (an empty chart and table would say it three times)."""
    counters = all_counters(run)
    if counters.empty:
        return [C.card("Counters", html.P(NO_NVML, id=ids.N_NONE, className="muted"))]
    panels = [frame.panel(_title(counters), lambda: _counters_card(run, counters))]
    if not a.table("nvml").empty:
        panels.append(frame.panel("NVML summary", lambda: C.table_card(
            ids.N_SUMMARY, T.BY_NAME["nvml"], a.table("nvml"))))
    return panels


def _title(counters: pd.DataFrame) -> str:
    """"NVML counters", or "Counters" where the traces' own counter samples join them."""
    own = counters["metric"].str.startswith(S.TRACE_METRIC_PREFIX).any()
    return "Counters" if own else "NVML counters"


def _counters_card(run, counters: pd.DataFrame) -> html.Section:
    metrics = set(counters["metric"])
    available = sorted(metrics - {REASONS})
    chosen = [m for m in DEFAULT_METRICS if m in available]
    options = [{"label": F.metric_label(m), "value": m} for m in available]
    picker = dcc.Dropdown(id=ids.N_METRICS, options=options, value=chosen, multi=True,
                          placeholder="metrics", className="dropdown wide")
    hint = "Steps are shaded blue" + ("; periods with a clock-throttle reason are red."
                                      if REASONS in metrics else ".")
    return C.card(_title(counters), picker,
                  C.loading(C.graph(ids.N_GRAPH, figure_or_error(run, chosen))),
                  html.P(hint, className="hint"))


def register(app, results) -> None:
    frame.register_run_page(__name__, results, layout, TAB)

    @app.callback(Output(ids.N_GRAPH, "figure"), Input(ids.N_METRICS, "value"),
                  State(ids.RUN_STORE, "data"), prevent_initial_call=True)
    def pick_metrics(metrics, store):
        key = frame.stored_run(results, store)
        return figure_or_error(results.run(key), list(metrics or []))
