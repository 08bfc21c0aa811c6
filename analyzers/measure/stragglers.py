"""Stragglers: a rank the others keep waiting for, judged on collectives matched across ranks.

A rank is flagged only on evidence (all of, with the thresholds named):

- there are at least two ranks and it took part in >= ``straggler_min_collectives`` matched
  collectives;
- it arrived last more often than chance would make it: with no straggler each of a
  collective's ``n`` ranks is last with probability 1/n;
- the other ranks' *exposed* wait for it, averaged over every other rank of the run and
  summed per step, is >= ``straggler_min_wait_frac`` of their median step time (the cost
  grades the severity). On a mesh a rank keeps its peers of several groups waiting (its
  tensor- and data-parallel peers): their waits add up, divided by all the others, and one
  rank's wait for it counts at most its own profiled time (:mod:`peers`).

Every rank that costs the others this much is flagged, not only the most certain one: the
statistics support the flag, they do not gate it. The number of times a rank is last is a
sum of coin flips (Poisson-binomial), and ``p_value`` is the chance of seeing at least as
many with no straggler; the finding says how strong that evidence is ("last at 62% of 50
collectives" between two ranks, p = 0.06, is weak; 68%, p = 0.008, is not). Each straggler's
row names the collective the others wait in most (kind, size, process group), and the facts
say which rank cost the others most in each step, so a straggler that changes during the run
is said.

A process group with a slow link (:mod:`groups`) arrives late as a whole at the collectives
that follow, and whichever of its ranks is last by a hair would look like the others'
straggler: :func:`excuse_slow_groups` keeps such a rank flagged only if arriving on time by
itself would save the others enough, so that the slow group is the one cause said.

Waits longer than a step are read as misaligned clocks only where no group explains them: a
rank waiting, within one group, longer than its own step. Point-to-point transfers (a
pipeline's send/recv) are left out of the judgement (:mod:`peers`).

Exposed wait is the part of a rank's wait in which its GPU ran nothing but the collective
(from :mod:`comms`). Raw wait overstates the cost wherever the collective overlaps compute:
in DDP the gradient all_reduce waits while backward keeps the GPU busy. On the 2 x H200
captures the late rank's others lose 5.10 ms/step raw but 1.47 ms/step exposed (14.1% of the
step) in zoo/straggler, and 0.89 ms/step raw (10.9%) but 0.06 ms/step exposed (0.7%) in
zoo/balanced, where rank 0 happens to start every all_reduce last.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure import peers
from profkit.analyzers.measure.comms import (
    COLLECTIVE_WAITS,
    COLLECTIVES,
    EXPOSED_WAIT_NS,
    KEY,
    LAST_RANK,
    N_COLLECTIVES,
    N_LAST,
    N_RANKS,
    RANK,
    RANK_WAITS,
    WAIT_NS,
)
from profkit.analyzers.measure.latewaits import (
    coll_rows,
    costliest_by_step,
    others_wait,
    wait_collectives,
)
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals
from profkit import schema as S
from profkit.columns import values_in
from profkit.model import RankData, Run, step_spans, step_times_ns

STRAGGLERS = "stragglers"
LATE_SHARE = "late_share"
OTHERS_WAIT_NS_PER_STEP = "others_wait_ns_per_step"  # raw: latest start - their start
OTHERS_EXPOSED_WAIT_NS_PER_STEP = "others_exposed_wait_ns_per_step"
OTHERS_STEP_NS = "others_step_ns"  # median over the other ranks of their median step time
WAIT_FRAC = "wait_frac"  # exposed wait per step / others' step time
COMPUTE_NS_PER_STEP = "compute_ns_per_step"  # merged compute kernels within the steps
MEDIAN_STEP_NS = "median_step_ns"
NO_STEP_STATS = {MEDIAN_STEP_NS: np.nan, COMPUTE_NS_PER_STEP: np.nan}  # a rank without steps
OTHERS_COMPUTE_NS_PER_STEP = "others_compute_ns_per_step"
STRAGGLER = "straggler"
EVIDENCE = "evidence"
P_VALUE = "p_value"  # chance of being last this often with no straggler
EXPECTED_LAST = "expected_last"  # how often it would be last by chance
WAIT_COLLECTIVE = "wait_collective"  # the collective the others wait in most for this rank
WAIT_COLLECTIVE_SHARE = "wait_collective_share"  # its share of their exposed wait
STRAGGLER_COLUMNS = (
    RANK, N_COLLECTIVES, N_LAST, EXPECTED_LAST, LATE_SHARE, P_VALUE, OTHERS_WAIT_NS_PER_STEP,
    OTHERS_EXPOSED_WAIT_NS_PER_STEP, OTHERS_STEP_NS, WAIT_FRAC, COMPUTE_NS_PER_STEP,
    OTHERS_COMPUTE_NS_PER_STEP, STRAGGLER, WAIT_COLLECTIVE, WAIT_COLLECTIVE_SHARE, EVIDENCE,
)


def find_stragglers(run: Run, comms: Result, thresholds: Thresholds = DEFAULT) -> Result:
    """:func:`judge_stragglers` with each rank's step statistics taken from ``run``."""
    return judge_stragglers(comms, {r: rank_step_stats(d) for r, d in run.ranks.items()},
                            thresholds)


def judge_stragglers(comms: Result, step_stats: dict[int, dict[str, float]],
                     thresholds: Thresholds = DEFAULT, layout: dict | None = None) -> Result:
    """Judge each rank from :func:`comms.analyze_collectives`'s tables (see module doc) and
    each rank's :func:`rank_step_stats`; ``layout``: the facts of
    :func:`layout.combine_layout` (group labels and dimensions), when known.

    Table ``stragglers``: one row per rank with its late share, what the others lose to it
    per step (ns, raw and exposed), their step time, its and their GPU compute per step (ns),
    whether it is flagged and a one-line evidence summary. One finding per flagged rank.
    """
    coll = comms.tables.get(COLLECTIVES)
    waits = comms.tables.get(COLLECTIVE_WAITS)
    per_rank = comms.tables.get(RANK_WAITS)
    if coll is None or waits is None or per_rank is None or per_rank.empty:
        return Result(tables={STRAGGLERS: _empty()})
    coll, waits, per_rank = peers.without_pipeline(coll, waits, per_rank, layout)
    if per_rank.empty:
        return Result(tables={STRAGGLERS: _empty()})
    late = _late_waits(coll, waits)
    table = _straggler_table(step_stats, coll, waits, per_rank, late)
    table[STRAGGLER] = _flag(table, thresholds)
    labels = (layout or {}).get("labels") or {}
    table[WAIT_COLLECTIVE], table[WAIT_COLLECTIVE_SHARE] = wait_collectives(table, late, labels)
    table[EVIDENCE] = [_evidence(row) for row in table.to_dict("records")]
    n_steps = _n_steps(coll)
    impossible = peers.unexplained_waits(late, step_stats, n_steps, labels)
    if len(impossible):  # waiting longer than a whole step in one group: clocks are off
        table[STRAGGLER] = False
    return Result(tables={STRAGGLERS: table[list(STRAGGLER_COLUMNS)]},
                  facts={"topic": "stragglers", "thresholds": thresholds,
                         "misaligned": impossible, "table": table,
                         "costliest_by_step": costliest_by_step(late, table, thresholds)})


def _empty() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype="float64") for c in STRAGGLER_COLUMNS})
    return frame.astype({RANK: "int64", STRAGGLER: bool, EVIDENCE: object,
                         WAIT_COLLECTIVE: object})


def _straggler_table(step_stats: dict[int, dict[str, float]], coll: pd.DataFrame, waits: pd.DataFrame,
                     per_rank: pd.DataFrame, late: pd.DataFrame) -> pd.DataFrame:
    # numpy columns, one frame at the end (each pandas column assignment costs ~0.1 ms)
    ranks = per_rank[RANK].to_numpy()
    n_coll, n_last = per_rank[N_COLLECTIVES].to_numpy(), per_rank[N_LAST].to_numpy()
    t = {RANK: ranks, N_COLLECTIVES: n_coll, N_LAST: n_last,
         LATE_SHARE: n_last / np.where(n_coll > 0, n_coll, np.nan)}
    chances = _last_chances(coll, waits)
    t[EXPECTED_LAST] = [float(np.sum(chances.get(int(r), []))) for r in ranks]
    t[P_VALUE] = [tail_probability(chances.get(int(r), np.empty(0)), int(k))
                  for r, k in zip(ranks, n_last)]
    n_steps = _n_steps(coll)
    stats = [step_stats.get(int(r), NO_STEP_STATS) for r in ranks]
    cap = {int(r): s[MEDIAN_STEP_NS] * n_steps for r, s in zip(ranks, stats)}
    raw, exposed = others_wait(late, cap)
    for col, series in ((OTHERS_WAIT_NS_PER_STEP, raw), (OTHERS_EXPOSED_WAIT_NS_PER_STEP, exposed)):
        by_rank = dict(zip(series.index.tolist(), series.to_numpy(np.float64)))
        total = np.array([by_rank.get(r, 0.0) for r in ranks.tolist()], dtype=np.float64)
        t[col] = total / n_steps if n_steps else np.full(len(ranks), np.nan)
    step_ns = np.array([s[MEDIAN_STEP_NS] for s in stats], dtype=np.float64)
    compute = np.array([s[COMPUTE_NS_PER_STEP] for s in stats], dtype=np.float64)
    t[OTHERS_STEP_NS] = _others(step_ns, np.nanmedian)
    t[COMPUTE_NS_PER_STEP] = compute
    t[OTHERS_COMPUTE_NS_PER_STEP] = _others(compute, np.nanmean)
    others_step = t[OTHERS_STEP_NS]
    t[WAIT_FRAC] = t[OTHERS_EXPOSED_WAIT_NS_PER_STEP] / np.where(others_step > 0, others_step,
                                                                  np.nan)
    return pd.DataFrame(t)


def _n_steps(coll: pd.DataFrame) -> int:
    """The distinct profiled steps of the matched collectives."""
    steps = coll[S.STEP].to_numpy()
    return len(np.unique(steps[steps >= 0]))


def _last_chances(coll: pd.DataFrame, waits: pd.DataFrame) -> dict[int, np.ndarray]:
    """Per rank, 1/n for each matched collective it took part in (n ranks, one of them last;
    collectives that all ranks started together have no last rank and are left out)."""
    at = coll_rows(coll, waits)
    at, rank = at[at >= 0], waits[RANK].to_numpy()[at >= 0]
    n, last = coll[N_RANKS].to_numpy()[at], coll[LAST_RANK].to_numpy()[at]
    keep = (n >= 2) & (last >= 0)
    order = np.argsort(rank[keep], kind="stable")  # each rank's rows in the waits' order
    rank, chance = rank[keep][order], 1.0 / n[keep][order].astype(np.float64)
    ranks, first = np.unique(rank, return_index=True)
    return {int(r): c for r, c in zip(ranks, np.split(chance, first[1:]))}


def tail_probability(chances: np.ndarray, k: int) -> float:
    """P(at least ``k`` successes) for independent trials with success chances ``chances``
    (Poisson-binomial): exact by dynamic programming up to 4000 trials, else the normal
    approximation with a continuity correction."""
    n = len(chances)
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if n > 4000:
        from math import erfc, sqrt

        mean, var = float(chances.sum()), float((chances * (1 - chances)).sum())
        return 0.5 * erfc((k - 0.5 - mean) / sqrt(2 * var)) if var > 0 else float(k <= mean)
    dist = np.zeros(n + 1)
    dist[0] = 1.0
    for i, p in enumerate(chances):
        dist[1:i + 2] = dist[1:i + 2] * (1 - p) + dist[:i + 1] * p
        dist[0] *= 1 - p
    return float(min(1.0, dist[k:].sum()))


def _others(values: np.ndarray, reduce) -> np.ndarray:
    """For each position, ``reduce`` over every other position (NaN when none is known)."""
    out = np.full(len(values), np.nan)
    for i in range(len(values)):
        rest = np.delete(values, i)
        if np.isfinite(rest).any():
            out[i] = reduce(rest)
    return out


def rank_step_stats(data: RankData) -> dict[str, float]:
    """A rank's median step time and merged compute-kernel time inside its profiled steps per
    step (ns; NaN without steps): all the straggler judgement needs of its events."""
    if len(data.steps) == 0:
        return dict(NO_STEP_STATS)
    start, end = step_spans(data.steps)
    kernels = data.of_kinds((S.KIND_KERNEL,))
    compute = values_in(kernels[S.CLASS], (S.CLS_COMPUTE,))
    ts = kernels[S.TS_NS].to_numpy(np.int64)[compute]
    busy = intervals.union(ts, ts + kernels[S.DUR_NS].to_numpy(np.int64)[compute])
    inside = intervals.clip(busy, int(start.min()), int(end.max()))
    return {MEDIAN_STEP_NS: float(np.median(step_times_ns(data.steps))),
            COMPUTE_NS_PER_STEP: intervals.total(inside) / len(data.steps)}


def _flag(t: pd.DataFrame, th: Thresholds) -> np.ndarray:
    """Flag every rank that costs the others enough and is last more often than chance."""
    enough = (len(t) >= 2) & (t[N_COLLECTIVES] >= th.straggler_min_collectives)
    late = t[N_LAST] > t[EXPECTED_LAST]
    costly = t[WAIT_FRAC].fillna(0) >= th.straggler_min_wait_frac
    return (enough & late & costly).to_numpy(bool)


def _late_waits(coll: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The other ranks' waits for each collective's last rank, in profiled steps, weighted so
    that they sum to the mean over the others (``share``)."""
    cols = [LAST_RANK, N_RANKS, S.COLL_NAME, S.MSG_BYTES, "pg"]
    at = coll_rows(coll, waits)  # (the inner merge on KEY, in the waits' order)
    w = pd.DataFrame({**{c: waits[c].to_numpy()[at >= 0] for c in waits.columns},
                      **{c: coll[c].to_numpy()[at[at >= 0]] for c in cols if c in coll.columns}})
    w = w[(w[LAST_RANK] >= 0) & (w[RANK] != w[LAST_RANK]) & (w[S.STEP] >= 0)]
    # The mean over every other rank of the run: a rank late in two groups (its tensor-
    # and data-parallel peers) costs the others the sum of both groups' waits, not each
    # group's mean added up.
    others = max(int(waits[RANK].nunique()) - 1, 1)
    return w.assign(share=1.0 / others)


def excuse_slow_groups(result: Result, comms: Result, slow: Result,
                       th: Thresholds = DEFAULT) -> Result:
    """``result`` (:func:`judge_stragglers`) without the stragglers whose lateness is their
    slow process group's (:func:`groups.find_slow_groups`): a group whose link is slow
    arrives late together at the collectives that follow, and one of its ranks, last by a
    hair, looks like the others' straggler. A flagged rank inside a slow group stays
    flagged only if arriving on time by itself (at the second-latest rank's time) would
    save the others at least ``straggler_min_wait_frac`` of their step; else its row says
    so and the slow group's finding is the one cause. Outside slow groups nothing changes
    (two ranks slow alike are both stragglers)."""
    table, groups = result.facts.get("table"), slow.tables.get("group_latency")
    if table is None or groups is None or not table[STRAGGLER].any() or \
            not groups["slow"].any():
        return result
    coll, waits = comms.tables[COLLECTIVES], comms.tables[COLLECTIVE_WAITS]
    member = _slow_group_of(coll, waits, set(groups.loc[groups["slow"], "pg"]))
    alone = _saving_alone(coll, waits)
    n_steps = coll.loc[coll[S.STEP] >= 0, S.STEP].nunique()
    table = table.copy()
    excused = set()
    for i in np.flatnonzero(table[STRAGGLER].to_numpy()):
        rank, step_ns = int(table[RANK].iat[i]), float(table[OTHERS_STEP_NS].iat[i])
        saved_ns = float(alone.get(rank, 0.0)) / n_steps if n_steps else 0.0
        if rank not in member or saved_ns >= th.straggler_min_wait_frac * step_ns:
            continue
        excused.add(rank)
        table.iat[i, table.columns.get_loc(STRAGGLER)] = False
        table.iat[i, table.columns.get_loc(EVIDENCE)] += (
            f"; late with its slow process group {member[rank]}: on time by itself it would "
            f"save the others {ms_text(saved_ns)}/step")
    by_step = {s: r for s, r in (result.facts.get("costliest_by_step") or {}).items()
               if r not in excused}
    return Result(tables={**result.tables, STRAGGLERS: table[list(STRAGGLER_COLUMNS)]},
                  facts={**result.facts, "table": table, "costliest_by_step": by_step})


def _slow_group_of(coll: pd.DataFrame, waits: pd.DataFrame, slow_pgs: set) -> dict[int, str]:
    """{rank: the first (by name) of the slow process groups ``slow_pgs`` it belongs to}."""
    ranks = waits[[KEY, RANK]].merge(coll[[KEY, "pg"]], on=KEY)
    ranks = ranks[ranks["pg"].isin(slow_pgs)].drop_duplicates([RANK, "pg"])
    out: dict[int, str] = {}
    for rank, pg in sorted(zip(ranks[RANK].tolist(), ranks["pg"].astype(str).tolist()),
                           key=lambda rp: rp[1]):
        out.setdefault(int(rank), pg)
    return out


def _saving_alone(coll: pd.DataFrame, waits: pd.DataFrame) -> pd.Series:
    """Per late rank: what the others' mean exposed wait would lose, summed over the
    collectives in profiled steps where it was last, had it arrived with the second-latest
    rank (each other rank's exposed wait, at most the gap between the last two; ns)."""
    w = _late_waits(coll, waits)
    gap = w.groupby(KEY)[WAIT_NS].transform("min")
    return (np.minimum(w[EXPOSED_WAIT_NS], gap) * w["share"]).groupby(w[LAST_RANK]).sum()


def ms_text(ns: float) -> str:
    return "n/a" if not np.isfinite(ns) else f"{ns / 1e6:.2f} ms"


def _evidence(row: dict) -> str:
    return (f"last at {row[N_LAST]}/{row[N_COLLECTIVES]} collectives (by chance "
            f"~{row[EXPECTED_LAST]:.0f}, p={row[P_VALUE]:.2g}); others wait "
            f"{ms_text(row[OTHERS_EXPOSED_WAIT_NS_PER_STEP])}/step exposed "
            f"({ms_text(row[OTHERS_WAIT_NS_PER_STEP])} raw), {pct_text(row[WAIT_FRAC])} of their "
            f"{ms_text(row[OTHERS_STEP_NS])} step")


def pct_text(frac: float) -> str:
    return "n/a" if not np.isfinite(frac) else f"{frac:.1%}"


def json_scalar(value):
    """JSON-ready scalar."""
    if isinstance(value, str):
        return value
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    value = float(value)
    return value if np.isfinite(value) else None
