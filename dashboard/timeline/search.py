"""Search the timeline by name: the events of the ranks shown whose name holds the query
(any case; GPU work by the short names the bars carry, CPU ranges by theirs), counted and
timed per layer, over the whole run and in the window shown. The total is the sum of the
matches' durations (nested CPU ranges that both match count twice, as Perfetto sums them).
Pure: each rank's lanes in, numbers and a sentence out."""

from __future__ import annotations

import pandas as pd
from profkit.dashboard.timeline.data import CPU, GPU

MAX_QUERY = 200  # characters of a query looked up (it comes from the browser)
LAYER_WORDS = {GPU: "GPU", CPU: "CPU"}


def matches(ranks, query: str, window: tuple[float, float] | None = None) -> pd.DataFrame:
    """One row per (layer, scope): events and total ms of the matches; ``scope`` "run" or
    "window" (the events overlapping ``window``, ms, when given)."""
    needle = query.strip().lower()[:MAX_QUERY]
    rows = []
    if not needle:
        return pd.DataFrame(columns=["layer", "scope", "events", "total_ms"])
    for layer in (GPU, CPU):
        frames = [r.events[layer] for r in ranks if r.events.get(layer) is not None]
        if not frames:
            continue
        ev = pd.concat([f[["name", "start_ms", "end_ms"]] for f in frames], ignore_index=True)
        hit = ev[ev["name"].astype(str).str.lower().str.contains(needle, regex=False)]
        rows.append({"layer": layer, "scope": "run", "events": len(hit),
                     "total_ms": float((hit["end_ms"] - hit["start_ms"]).sum())})
        if window is not None:
            inside = hit[(hit["end_ms"] >= window[0]) & (hit["start_ms"] <= window[1])]
            rows.append({"layer": layer, "scope": "window", "events": len(inside),
                         "total_ms": float((inside["end_ms"] - inside["start_ms"]).sum())})
    return pd.DataFrame(rows, columns=["layer", "scope", "events", "total_ms"])


def summary(found: pd.DataFrame, query: str, ranks_label: str) -> str:
    """``"gemm" on rank 1, rank 0: GPU 36 events, 4.213 ms in all; ... In this window: ...``"""
    if not query.strip():
        return ""
    def part(scope: str) -> str:
        rows = found[(found["scope"] == scope) & (found["events"] > 0)]
        return "; ".join(f"{LAYER_WORDS[r.layer]} {r.events:,} event(s), {r.total_ms:.3f} ms"
                         for r in rows.itertuples()) or "no match"
    text = f'"{query.strip()[:MAX_QUERY]}" on {ranks_label}: {part("run")} in the whole run'
    if (found["scope"] == "window").any():
        text += f"; in this window: {part('window')}"
    return text + "."
