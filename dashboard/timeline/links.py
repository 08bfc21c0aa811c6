"""Where the timeline opens and what it joins across ranks: the ranks shown by default (up
to eight: the straggler first, then the peer that waits for it most, then the others), the
window a finding points at and the URL of that view
(``/run/<key>/timeline?ranks=1,0&t0=..&t1=..``, ms after the run's origin), and the matched
collectives linked from rank to rank. Pure functions over the run
and its analysis.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.breakdown import PARTS
from profkit.analyzers.report.render import sorted_findings
from profkit.dashboard.timeline.data import GPU, origin_ns, rank_windows, row_name
from profkit.dashboard.ui.components import run_href

RANK_CAP = 8  # ranks shown by default (the straggler and its peer first)
PAD = 0.05  # a finding's window is widened by this share of its length on each side
MAX_LINKS = 300  # matched collectives drawn in one window (the largest skews first)
MAX_MS = 1e12  # a URL time beyond this (~30 years) is no time of any run
_RANKS_RE = re.compile(r"\d{1,9}(?:-\d{1,9})?(?:,\d{1,9}(?:-\d{1,9})?){0,255}")
# findings whose cause is not a breakdown part of its own name
PART_OF_CATEGORY = {"launch": "cpu_launch", "runtime_calls": "cpu_launch"}
LINK_COLUMNS = ["key", "rank", "start_ms", "stream", "collective", "bytes", "skew_ms",
                "last_rank"]


def default_ranks(run, analysis, cap: int = RANK_CAP) -> list[int]:
    """Up to ``cap`` ranks: the stragglers and the peer that waits for the first one most,
    then the other ranks in order."""
    ids = run.rank_ids
    first = [int(s["rank"]) for s in analysis.stragglers if int(s["rank"]) in run.ranks]
    if first:
        peer = waiting_peer(analysis, first[0], ids)
        first += [peer] if peer is not None else []
    return list(dict.fromkeys(first + list(ids)))[:cap]


def waiting_peer(analysis, rank: int, ids: list[int]) -> int | None:
    """The rank other than ``rank`` that waited longest in collectives (else the first)."""
    waits = analysis.table("rank_waits")
    if len(waits):
        waits = waits[(waits["rank"] != rank) & waits["rank"].isin(ids)]
    if len(waits) and waits["wait_ns"].max() > 0:
        return int(waits.loc[waits["wait_ns"].idxmax(), "rank"])
    return next((r for r in ids if r != rank), None)


def parse_ranks(text, known) -> list[int] | None:
    """``"1,0"`` or ``"0-63"`` from a URL: the known ranks it names, in its order; None
    when it names none or is not such a list."""
    if not isinstance(text, str) or not _RANKS_RE.fullmatch(text):
        return None
    known = set(known)
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        lo, hi = int(lo), int(hi or lo)
        out += [r for r in sorted(known) if lo <= r <= hi] if hi > lo else [lo] * (lo in known)
    return list(dict.fromkeys(out)) or None


def parse_ms(text) -> float | None:
    """A time in ms from a URL; None unless it is a finite number of sane size."""
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) and abs(value) < MAX_MS else None


def query_view(run, analysis=None, ranks=None, t0=None, t1=None,
               finding=None) -> tuple[list[int] | None, tuple | None]:
    """The ranks and window (ms) a timeline URL asks for: explicit ``ranks``/``t0``/``t1``,
    else the place in time of the analysis' ``finding``-th finding (report order); None for
    what it does not name or names wrongly (the page then shows its default)."""
    lo, hi = parse_ms(t0), parse_ms(t1)
    window = (lo, hi) if lo is not None and hi is not None and hi > lo else None
    asked = parse_ranks(ranks, run.rank_ids)
    place = finding_place(analysis, run, finding) if window is None else None
    if place is not None:
        return asked or place[0], place[1:]
    return asked, window


def finding_place(analysis, run, index) -> tuple[list[int], float, float] | None:
    """:func:`finding_window` of the ``index``-th finding in report order (a URL's text)."""
    if analysis is None or not isinstance(index, str) or not index.isdigit() or len(index) > 6:
        return None
    found = sorted_findings(analysis)
    return finding_window(analysis, found[int(index)], run) if int(index) < len(found) else None


def finding_link(key: str, index: int) -> str:
    """The timeline URL that opens at the ``index``-th finding's window (the timeline page
    works the window out, so the page linking to it need not load the run)."""
    return f"{run_href(key, 'timeline')}?finding={index}"


def finding_has_place(analysis, finding) -> bool:
    """Whether :func:`finding_window` can place a finding, from the analysis alone."""
    rank = finding.rank
    if rank is None or rank not in analysis.run.get("ranks_analyzed", []):
        return False
    if finding.category == "straggler":
        coll = analysis.table("collectives")
        return bool(len(coll)) and bool((coll["last_rank"] == rank).any())
    if finding.step is not None:
        steps = analysis.table("step_breakdown")
        return bool(len(steps)) and bool(((steps["rank"] == rank)
                                          & (steps["step"] == finding.step)).any())
    return busiest_step(analysis, rank, part_of(analysis, finding)) is not None


def timeline_href(key: str, ranks: list[int], t0_ms: float, t1_ms: float) -> str:
    return (f"{run_href(key, 'timeline')}?ranks={','.join(map(str, ranks))}"
            f"&t0={t0_ms:.4f}&t1={t1_ms:.4f}")


def finding_href(key: str, analysis, run, finding) -> str | None:
    """The timeline URL of a finding's window, None when it has no place in time."""
    where = finding_window(analysis, finding, run)
    return timeline_href(key, *where) if where else None


def finding_window(analysis, finding, run) -> tuple[list[int], float, float] | None:
    """(ranks, t0_ms, t1_ms) where a finding can be seen, ms after the run's origin; None
    when it has no place in time (run-wide findings, MFU, ...). A straggler: the matched
    collectives of the step where the others waited longest for it, on it and the peer that
    waited most. A finding of a step: that step. A cause (cpu_launch, host_sync, ...): the
    used step of the rank with the most of it. The step windows are the analysis' own."""
    rank = finding.rank
    if rank is None or rank not in run.ranks:
        return None
    if finding.category == "straggler":
        return straggler_window(analysis, run, rank)
    step = finding.step
    if step is None:
        step = busiest_step(analysis, rank, part_of(analysis, finding))
    starts, ends, numbers = rank_windows(run.ranks[rank])
    hit = np.flatnonzero(numbers == step) if step is not None else []
    if len(hit) == 0:
        return None
    origin = origin_ns(run)
    return [rank], *padded(float(starts[hit[0]] - origin) / 1e6,
                           float(ends[hit[0]] - origin) / 1e6)


def part_of(analysis, finding) -> str | None:
    """The breakdown part a finding is about: its category, or the rank's largest idle cause
    for an ``idle_code`` finding."""
    if finding.category in PARTS:
        return finding.category
    if finding.category == "idle_code":
        code = analysis.table("idle_code")
        code = code[code["rank"] == finding.rank] if len(code) else code
        return str(code.groupby("part")["idle_ns"].sum().idxmax()) if len(code) else None
    return PART_OF_CATEGORY.get(finding.category)


def busiest_step(analysis, rank: int, part: str | None) -> int | None:
    """The used step of ``rank`` with the most time charged to ``part``."""
    steps = analysis.table("step_breakdown")
    if part is None or steps.empty or part not in steps:
        return None
    mine = steps[(steps["rank"] == rank) & steps["used"].astype(bool)]
    return int(mine.loc[mine[part].idxmax(), "step"]) if len(mine) else None


def straggler_window(analysis, run, rank: int) -> tuple[list[int], float, float] | None:
    waits, coll = analysis.table("collective_waits"), analysis.table("collectives")
    if waits.empty or coll.empty:
        return None
    late = waits[waits["key"].isin(coll.loc[coll["last_rank"] == rank, "key"])]
    if late.empty:
        return None
    step = late.groupby("step")["wait_ns"].sum().idxmax()
    mine = late[late["step"] == step]
    origin = origin_ns(run)
    lo = (int(mine["start_ns"].min()) - origin) / 1e6
    hi = (int((mine["start_ns"] + mine["dur_ns"]).max()) - origin) / 1e6
    peer = waiting_peer(analysis, rank, run.rank_ids)
    return [rank] + ([peer] if peer is not None else []), *padded(lo, hi)


def padded(lo: float, hi: float) -> tuple[float, float]:
    pad = PAD * max(hi - lo, 1e-3)
    return lo - pad, hi + pad


def link_table(analysis, run, origin: int) -> pd.DataFrame:
    """Every rank's start of every collective matched across ranks (GPU kernels only): key,
    rank, start_ms, the stream it ran on, collective, bytes, the start skew (ms) and the
    rank that arrived last."""
    waits, coll = analysis.table("collective_waits"), analysis.table("collectives")
    if waits.empty or coll.empty:
        return pd.DataFrame(columns=LINK_COLUMNS)
    coll = coll[coll["on_gpu"].astype(bool)] if "on_gpu" in coll else coll
    rows = waits[waits["key"].isin(coll["key"]) & waits["rank"].isin(run.rank_ids)]
    frames = []
    for rank, w in rows.groupby("rank"):
        mine = run.ranks[int(rank)].collectives.drop_duplicates("ts_ns").set_index("ts_ns")
        stream = w["start_ns"].map(mine["stream"]) if len(mine) else pd.Series(np.nan, w.index)
        frames.append(pd.DataFrame({"key": w["key"], "rank": int(rank),
                                    "start_ms": (w["start_ns"] - origin) / 1e6,
                                    "stream": stream.fillna(-1).astype(np.int64)}))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LINK_COLUMNS[:4])
    info = coll[["key", "collective", "bytes", "start_skew_ns", "last_rank"]]
    table = table.merge(info, on="key", how="left")
    table["skew_ms"] = table.pop("start_skew_ns") / 1e6
    return table[LINK_COLUMNS]


def links_in_window(table: pd.DataFrame, ranks: list[int], lanes: list[str], compact: bool,
                    x0: float, x1: float, max_links: int = MAX_LINKS) -> tuple[pd.DataFrame, int]:
    """The matched collectives of ``ranks`` whose starts reach into [x0, x1] ms, each with
    the lane it ran on per rank (in the order the ranks are drawn), and how many there were
    before keeping the ``max_links`` with the largest skew."""
    rows = table[table["rank"].isin(ranks)]
    if rows.empty:
        return rows.assign(lane=pd.Series(dtype=str)), 0
    lane = [row_name(r, GPU) if compact else f"rank {r} · GPU stream {s}"
            for r, s in zip(rows["rank"].tolist(), rows["stream"].tolist())]
    rows = rows.assign(lane=lane)
    rows = rows[rows["lane"].isin(set(lanes))]
    span = rows.groupby("key")["start_ms"].agg(["min", "max", "size"])
    span = span[(span["size"] >= 2) & (span["max"] >= x0) & (span["min"] <= x1)]
    chosen = rows[rows["key"].isin(span.index)].drop_duplicates(["key", "rank"])
    if len(span) > max_links:
        keep = chosen.drop_duplicates("key").nlargest(max_links, "skew_ms")["key"]
        chosen = chosen[chosen["key"].isin(keep)]
    order = {r: i for i, r in enumerate(ranks)}
    chosen = chosen.assign(_o=chosen["rank"].map(order)).sort_values(["key", "_o"])
    return chosen.drop(columns="_o").reset_index(drop=True), len(span)
