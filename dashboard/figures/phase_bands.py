"""The inference phases on the timeline: a translucent band per phase window (prefill,
decode, mixed; :mod:`profkit.dashboard.timeline.phases` merges a step's consecutive forwards
of one phase into one window) over its rank's lanes, behind the events and above the step
bands, with a small label at its foot where the window shows enough of it. Pure: the view's
``phases`` table and each rank's lane block in, plotly shapes and annotations out.
"""

from __future__ import annotations

import pandas as pd

PHASE_FILLS = {"prefill": "#f97316", "decode": "#14b8a6", "mixed": "#a855f7"}
PHASE_OPACITY = 0.2
MAX_PHASE_BANDS = 300  # beyond this many in all, the first rank's only, over every lane
MAX_PHASE_LABELS = 40
LABEL_MIN_SHARE = 0.04  # a band showing less of the window than this gets no label


def legend(phases) -> dict[str, str]:
    """The timeline legend's entries of ``phases``: each fill a little stronger than the
    band's (a dot of the band's own tint is hard to see)."""
    def tint(hex_color: str) -> str:
        r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
        return f"rgba({r}, {g}, {b}, {min(1.0, 2 * PHASE_OPACITY)})"
    return {f"{p} (inference phase)": tint(c) for p, c in PHASE_FILLS.items() if p in phases}


def phase_bands(phases: pd.DataFrame | None, blocks: dict[int, tuple[float, float]],
                x0_ms: float, x1_ms: float, n_lanes: int) -> tuple[list[dict], list[dict]]:
    """(shapes, labels) of the phase windows, each over its rank's block (bottom, top) of
    lanes; when there would be more than :data:`MAX_PHASE_BANDS`, the first rank's over
    all ``n_lanes``."""
    if phases is None or phases.empty or not blocks:
        return [], []
    if len(phases) > MAX_PHASE_BANDS:
        first = next(iter(blocks))
        phases = phases[phases["rank"] == first]
        blocks = {first: (-0.5, n_lanes - 0.5)}
    shapes, labels = [], []
    for p in phases.itertuples(index=False):
        if p.rank not in blocks:
            continue
        y0, y1 = blocks[p.rank]
        what = f"{p.phase}" + (f" ({p.forwards} forwards)" if p.forwards > 1 else "")
        shapes.append(dict(type="rect", xref="x", yref="y", x0=p.start_ms, x1=p.end_ms,
                           y0=y0, y1=y1, layer="below", opacity=PHASE_OPACITY,
                           fillcolor=PHASE_FILLS.get(p.phase, "#9ca3af"), line=dict(width=0),
                           name=f"{what} · step {p.step} · rank {p.rank}"))
        shown = min(p.end_ms, x1_ms) - max(p.start_ms, x0_ms)
        if len(phases) <= MAX_PHASE_LABELS and shown >= LABEL_MIN_SHARE * (x1_ms - x0_ms):
            labels.append(dict(x=max(p.start_ms, x0_ms), y=y0, xref="x", yref="y",
                               xanchor="left", yanchor="bottom", text=what, showarrow=False,
                               font=dict(size=10, color=PHASE_FILLS.get(p.phase, "#6b7280")),
                               bgcolor="rgba(255,255,255,0.8)"))
    return shapes, labels
