"""Collectives matched across ranks: each rank's wait, the skew and the bandwidth of each one.

Matching. A collective is one operation run by every rank of its process group. Rows are
joined across ranks, per process group, by the first key that every row of that group has:

1. ``(pg_name, seq)`` when every row carries PyTorch's sequence number (``seq >= 0``);
2. ``comms_id`` when every row carries one;
3. otherwise (the torch 2.11 H200 sample traces: ``seq`` is -1 and ``comms_id`` empty) the
   occurrence index within ``(pg_name, collective, step, bytes)`` on each rank, in start
   order (one process group's collectives run in issue order on one stream). ``bytes`` is
   part of the key only for collectives whose buffer is the same on every rank. Keying on
   the step and size keeps a collective missing on one rank (a trace window cut mid-step, a
   lost event) from shifting every later match: at worst the rest of that size's
   occurrences within that step pair off by one, and the last one is left unmatched.

Within any key, each rank's repeats get an occurrence suffix, so a rank has at most one row
per key. A key is matched when every rank that has rows in the process group has a row
under it and there are at least two such ranks; other keys are dropped and counted in the
``matching`` table and, where two or more ranks share the group, in an info finding.

Clocks. The loader has already applied ``run.meta["clock_offsets_ns"]``. Only when the
ranks are known (``run.meta["ranks"][r]["host"]``) to sit on more than one host is a
further offset estimated, per host since a host's ranks share its clock: the median over
matched synchronising collectives (all ranks leave them together) of the host's ranks' end
minus the reference (lowest) rank's end. Otherwise every offset is 0.

Per matched collective: latency = shortest duration over ranks (the rank that arrived last
waits least); each rank's wait = latest start - its start; its exposed wait = the part of
that wait its GPU spent on nothing but communication (no compute, memcpy or memset kernel
running; a CPU backend's wait is all exposed); start and end skew = latest - earliest;
algbw = bytes / latency and busbw = algbw x the nccl-tests factor, in GB/s (1e9 B/s).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.findings import Finding, Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals
from profkit import schema as S
from profkit.model import Run

# Output tables and their columns (units in the names).
COLLECTIVES = "collectives"
COLLECTIVE_WAITS = "collective_waits"
RANK_WAITS = "rank_waits"
MATCHING = "matching"
CLOCK_OFFSETS = "clock_offsets"

RANK = "rank"
KEY = "key"
PG = "pg"
KEY_MODE = "key_mode"  # seq / comms_id / occurrence
N_RANKS = "n_ranks"
START_NS = "start_ns"  # on the aligned clock, after any estimated offset
END_NS = "end_ns"
LATENCY_NS = "latency_ns"
ALGBW_GBPS = "algbw_gbps"
BUSBW_GBPS = "busbw_gbps"
START_SKEW_NS = "start_skew_ns"
END_SKEW_NS = "end_skew_ns"
LAST_RANK = "last_rank"  # the rank that started last, -1 when all started together
WAIT_NS = "wait_ns"
EXPOSED_WAIT_NS = "exposed_wait_ns"
WAIT_NS_PER_STEP = "wait_ns_per_step"
EXPOSED_WAIT_NS_PER_STEP = "exposed_wait_ns_per_step"
N_COLLECTIVES = "n_collectives"
N_LAST = "n_last"
LAST_SHARE = "last_share"
N_ROWS = "n_rows"
N_MATCHED = "n_matched"
N_UNMATCHED_KEYS = "n_unmatched_keys"
N_UNMATCHED_ROWS = "n_unmatched_rows"
HOST = "host"
OFFSET_NS = "offset_ns"

COLLECTIVE_TABLE_COLUMNS = (
    KEY, S.COLL_NAME, PG, N_RANKS, S.GROUP_SIZE, S.MSG_BYTES, LATENCY_NS, ALGBW_GBPS,
    BUSBW_GBPS, START_SKEW_NS, END_SKEW_NS, LAST_RANK, S.STEP, START_NS, S.ON_GPU,
)
WAIT_TABLE_COLUMNS = (KEY, RANK, WAIT_NS, EXPOSED_WAIT_NS, START_NS, S.DUR_NS, S.STEP)
RANK_TABLE_COLUMNS = (
    RANK, N_COLLECTIVES, WAIT_NS, EXPOSED_WAIT_NS, WAIT_NS_PER_STEP, EXPOSED_WAIT_NS_PER_STEP,
    N_LAST, LAST_SHARE,
)
MATCHING_TABLE_COLUMNS = (PG, KEY_MODE, N_RANKS, N_ROWS, N_MATCHED, N_UNMATCHED_KEYS,
                          N_UNMATCHED_ROWS)
OFFSET_TABLE_COLUMNS = (RANK, HOST, OFFSET_NS)

# All ranks leave these together, so their ends can calibrate clocks.
SYNCHRONISING = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
# The full buffer is the same size on every rank (all_to_all and p2p splits may differ).
SIZE_INVARIANT = frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                            "barrier"})


def busbw_factor(collective: np.ndarray, n: np.ndarray) -> np.ndarray:
    """nccl-tests bus-bandwidth factor per row: 2(n-1)/n for all_reduce; (n-1)/n for
    reduce_scatter, all_gather, all_to_all, gather, scatter; 1 for broadcast, reduce and
    send_recv; NaN otherwise (barrier moves no payload)."""
    n = np.asarray(n, dtype=np.float64)
    collective = np.asarray(collective, dtype=object)
    ring = (n - 1) / np.where(n > 0, n, np.nan)
    factor = np.full(len(n), np.nan)
    factor = np.where(collective == "all_reduce", 2 * ring, factor)
    factor = np.where(np.isin(collective, ["reduce_scatter", "all_gather", "all_to_all",
                                           "gather", "scatter"]), ring, factor)
    return np.where(np.isin(collective, ["broadcast", "reduce", "send_recv"]), 1.0, factor)


def analyze_collectives(run: Run, thresholds: Thresholds = DEFAULT) -> Result:
    """Match collectives across ranks and measure waits, skew and bandwidth (see module doc).

    Tables: ``collectives`` (one row per matched collective), ``collective_waits`` (one row
    per matched collective and rank), ``rank_waits`` (one row per rank), ``matching`` (per
    process group: key used, rows matched and dropped), ``clock_offsets`` (per rank, ns
    subtracted from its times). ``thresholds`` is accepted for a uniform analyzer signature.
    """
    del thresholds  # no threshold applies to measuring; stragglers.py judges the result
    rows = _stack(run)
    rows = _assign_keys(rows)
    rows, matching = _match(rows)
    offsets = _clock_offsets(run, rows)
    rows[START_NS] -= rows[RANK].map(offsets[OFFSET_NS]).fillna(0).astype(np.int64)
    rows[END_NS] = rows[START_NS] + rows[S.DUR_NS]
    rows = _add_waits(run, rows, offsets[OFFSET_NS])
    coll = _collective_table(rows)
    tables = {
        COLLECTIVES: coll,
        COLLECTIVE_WAITS: rows[list(WAIT_TABLE_COLUMNS)].reset_index(drop=True),
        RANK_WAITS: _rank_table(rows, coll),
        MATCHING: matching,
        CLOCK_OFFSETS: offsets.reset_index()[list(OFFSET_TABLE_COLUMNS)],
    }
    return Result(tables=tables, findings=_matching_findings(matching))


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})


def _stack(run: Run) -> pd.DataFrame:
    """All ranks' collectives in one frame, text columns as plain strings."""
    parts = []
    for rank in run.rank_ids:
        c = run.ranks[rank].collectives
        if c is None or c.empty:
            continue
        parts.append(pd.DataFrame({
            RANK: np.full(len(c), rank, dtype=np.int64),
            S.COLL_NAME: c[S.COLL_NAME].astype(str).to_numpy(),
            PG: c[S.PG_NAME].astype(str).to_numpy(),
            S.SEQ: c[S.SEQ].to_numpy(np.int64),
            S.COMMS_ID: c[S.COMMS_ID].astype(str).to_numpy(),
            S.GROUP_SIZE: c[S.GROUP_SIZE].to_numpy(np.int64),
            S.STEP: c[S.STEP].to_numpy(np.int64),
            START_NS: c[S.TS_NS].to_numpy(np.int64),
            S.DUR_NS: c[S.DUR_NS].to_numpy(np.int64),
            S.MSG_BYTES: c[S.MSG_BYTES].to_numpy(np.float64),
            S.ON_GPU: c[S.ON_GPU].to_numpy(bool),
        }))
    if not parts:
        return pd.DataFrame({
            RANK: pd.Series(dtype="int64"), S.COLL_NAME: pd.Series(dtype=object),
            PG: pd.Series(dtype=object), S.SEQ: pd.Series(dtype="int64"),
            S.COMMS_ID: pd.Series(dtype=object), S.GROUP_SIZE: pd.Series(dtype="int64"),
            S.STEP: pd.Series(dtype="int64"), START_NS: pd.Series(dtype="int64"),
            S.DUR_NS: pd.Series(dtype="int64"), S.MSG_BYTES: pd.Series(dtype="float64"),
            S.ON_GPU: pd.Series(dtype=bool)})
    rows = pd.concat(parts, ignore_index=True)
    return rows.sort_values([RANK, START_NS], kind="stable").reset_index(drop=True)


def _assign_keys(rows: pd.DataFrame) -> pd.DataFrame:
    """Add KEY (the cross-rank join key) and KEY_MODE, chosen per process group."""
    rows = rows.copy()
    by_pg = rows.groupby(PG, sort=False)
    has_seq = by_pg[S.SEQ].transform("min").to_numpy() >= 0
    has_id = (rows[S.COMMS_ID] != "").groupby(rows[PG], sort=False).transform("all").to_numpy()
    nbytes = rows[S.MSG_BYTES].fillna(-1).astype(np.int64).astype(str)
    size = np.where(rows[S.COLL_NAME].isin(SIZE_INVARIANT), nbytes, "*")
    fallback = (rows[PG] + "/" + rows[S.COLL_NAME] + "/step " + rows[S.STEP].astype(str)
                + "/" + size + " B")
    base = np.where(has_seq, rows[PG] + "/seq " + rows[S.SEQ].astype(str),
                    np.where(has_id, "id " + rows[S.COMMS_ID], fallback))
    rows[KEY_MODE] = np.where(has_seq, "seq", np.where(has_id, "comms_id", "occurrence"))
    occurrence = rows.groupby([rows[RANK], pd.Series(base, index=rows.index)]).cumcount()
    rows[KEY] = pd.Series(base, index=rows.index) + " #" + occurrence.astype(str)
    return rows


def _match(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Keep keys present once on every rank of their process group; count the rest."""
    members = rows.groupby(PG, sort=False)[RANK].transform("nunique")
    present = rows.groupby(KEY, sort=False)[RANK].transform("size")
    ok = ((present == members) & (members >= 2)).to_numpy()
    stats = pd.DataFrame({PG: rows[PG], KEY_MODE: rows[KEY_MODE], "ok": ok, KEY: rows[KEY]})
    by_pg = stats.groupby([PG, KEY_MODE], sort=True)
    matching = pd.DataFrame({
        N_RANKS: members.groupby([stats[PG], stats[KEY_MODE]]).max(),
        N_ROWS: by_pg.size(),
        N_MATCHED: stats[ok].groupby([PG, KEY_MODE])[KEY].nunique(),
        N_UNMATCHED_KEYS: stats[~ok].groupby([PG, KEY_MODE])[KEY].nunique(),
        N_UNMATCHED_ROWS: (~stats["ok"]).groupby([stats[PG], stats[KEY_MODE]]).sum(),
    }).fillna(0).astype(np.int64).reset_index()
    if matching.empty:
        matching = _empty(MATCHING_TABLE_COLUMNS)
    return rows[ok].reset_index(drop=True), matching[list(MATCHING_TABLE_COLUMNS)]


def _hosts(run: Run) -> dict[int, str | None]:
    declared = run.meta.get("ranks") or {}
    hosts: dict[int, str | None] = {}
    for rank in run.rank_ids:
        info = declared.get(str(rank), declared.get(rank)) if isinstance(declared, dict) else None
        host = info.get("host") if isinstance(info, dict) else None
        hosts[rank] = host or run.ranks[rank].meta.get("host") or None
    return hosts


def _clock_offsets(run: Run, rows: pd.DataFrame) -> pd.DataFrame:
    """Per rank: host and the offset (ns) to subtract, indexed by rank (see module doc)."""
    hosts = _hosts(run)
    ranks = sorted(int(r) for r in rows[RANK].unique())
    table = pd.DataFrame({HOST: [hosts.get(r) or "" for r in ranks],
                          OFFSET_NS: np.zeros(len(ranks), dtype=np.int64)},
                         index=pd.Index(ranks, name=RANK, dtype="int64"))
    known = [hosts.get(r) for r in ranks]
    if not ranks or None in known or len(set(known)) < 2:
        return table
    sync = rows[rows[S.COLL_NAME].isin(SYNCHRONISING)]
    end = sync[START_NS] + sync[S.DUR_NS]
    ref = sync[RANK] == ranks[0]
    ref_end = sync[KEY].map(pd.Series(end[ref].to_numpy(), index=sync.loc[ref, KEY]))
    diff = (end - ref_end).dropna()
    per_host = diff.groupby(sync.loc[diff.index, RANK].map(hosts)).median()
    per_host[hosts[ranks[0]]] = 0
    table[OFFSET_NS] = table[HOST].map(per_host).fillna(0).round().astype(np.int64)
    return table


def _covered_before(iv: intervals.Intervals, t: np.ndarray) -> np.ndarray:
    """Length of the disjoint interval set ``iv`` lying before each time in ``t``, ns."""
    starts, ends = iv
    if len(starts) == 0:
        return np.zeros(len(t), dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, t, side="right")
    overshoot = np.where(k > 0, np.maximum(ends[np.maximum(k - 1, 0)] - t, 0), 0)
    return cum[k] - overshoot


def _gpu_work(run: Run, rank: int) -> intervals.Intervals:
    """Union of the rank's non-communication GPU work (compute, memcpy, memset)."""
    ev = run.ranks[rank].events
    busy = ev[ev[S.KIND].isin(S.GPU_KINDS) & (ev[S.CLASS] != S.CLS_COMMUNICATION)]
    start = busy[S.TS_NS].to_numpy(np.int64)
    return intervals.union(start, start + busy[S.DUR_NS].to_numpy(np.int64))


def _add_waits(run: Run, rows: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    latest = rows.groupby(KEY, sort=False)[START_NS].transform("max").to_numpy()
    start = rows[START_NS].to_numpy()
    wait = latest - start
    exposed = wait.copy()
    for rank in rows[RANK].unique():
        on_rank = (rows[RANK] == rank).to_numpy() & rows[S.ON_GPU].to_numpy()
        if not on_rank.any():
            continue
        work = _gpu_work(run, int(rank))  # on the loader's clock: undo the estimated offset
        off = int(offsets.get(rank, 0))
        hidden = (_covered_before(work, latest[on_rank] + off)
                  - _covered_before(work, start[on_rank] + off))
        exposed[on_rank] = wait[on_rank] - hidden
    rows = rows.copy()
    rows[WAIT_NS] = wait
    rows[EXPOSED_WAIT_NS] = exposed
    return rows


def _collective_table(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return _empty(COLLECTIVE_TABLE_COLUMNS)
    g = rows.groupby(KEY, sort=False)
    t = g.agg(**{S.COLL_NAME: (S.COLL_NAME, "first"), PG: (PG, "first"),
                 N_RANKS: (RANK, "size"), S.GROUP_SIZE: (S.GROUP_SIZE, "max"),
                 S.MSG_BYTES: (S.MSG_BYTES, "max"), LATENCY_NS: (S.DUR_NS, "min"),
                 START_NS: (START_NS, "min"), "last_start": (START_NS, "max"),
                 "first_end": (END_NS, "min"), "last_end": (END_NS, "max"),
                 S.STEP: (S.STEP, "max"), S.ON_GPU: (S.ON_GPU, "all")})
    t[START_SKEW_NS] = t["last_start"] - t[START_NS]
    t[END_SKEW_NS] = t["last_end"] - t["first_end"]
    last = rows.loc[g[START_NS].idxmax(), [KEY, RANK]].set_index(KEY)[RANK]
    t[LAST_RANK] = np.where(t[START_SKEW_NS] > 0, last.reindex(t.index).to_numpy(), -1)
    latency = t[LATENCY_NS].to_numpy(np.float64)
    t[ALGBW_GBPS] = t[S.MSG_BYTES].to_numpy() / np.where(latency > 0, latency, np.nan)
    n = np.where(t[S.GROUP_SIZE] > 0, t[S.GROUP_SIZE], t[N_RANKS])
    t[BUSBW_GBPS] = t[ALGBW_GBPS] * busbw_factor(t[S.COLL_NAME].to_numpy(), n)
    t = t.reset_index().sort_values(START_NS, kind="stable").reset_index(drop=True)
    return t[list(COLLECTIVE_TABLE_COLUMNS)]


def _rank_table(rows: pd.DataFrame, coll: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return _empty(RANK_TABLE_COLUMNS)
    n_steps = coll.loc[coll[S.STEP] >= 0, S.STEP].nunique()
    g = rows.groupby(RANK, sort=True)
    t = pd.DataFrame({N_COLLECTIVES: g.size(), WAIT_NS: g[WAIT_NS].sum(),
                      EXPOSED_WAIT_NS: g[EXPOSED_WAIT_NS].sum()})
    in_step = rows[rows[S.STEP] >= 0].groupby(RANK)
    for col, out in ((WAIT_NS, WAIT_NS_PER_STEP), (EXPOSED_WAIT_NS, EXPOSED_WAIT_NS_PER_STEP)):
        total = in_step[col].sum().reindex(t.index).fillna(0)
        t[out] = total / n_steps if n_steps else np.nan
    t[N_LAST] = coll[LAST_RANK].value_counts().reindex(t.index).fillna(0).astype(np.int64)
    t[LAST_SHARE] = t[N_LAST] / t[N_COLLECTIVES]
    return t.rename_axis(RANK).reset_index()[list(RANK_TABLE_COLUMNS)]


def _matching_findings(matching: pd.DataFrame) -> list[Finding]:
    """An info finding when rows were dropped from a group that two or more ranks share (a
    single-rank trace has nothing to match against and is no anomaly)."""
    matching = matching[matching[N_RANKS] >= 2]
    dropped = int(matching[N_UNMATCHED_ROWS].sum()) if len(matching) else 0
    if dropped == 0:
        return []
    total = int(matching[N_ROWS].sum())
    return [Finding(
        category="collectives", severity="info",
        message=f"{dropped} of {total} collective rows could not be matched across ranks "
                "and were left out of waits and bandwidth",
        recommendation="Profile the same steps on every rank (one profiler schedule), and "
                       "use a PyTorch whose traces carry 'Seq' or 'Comms Id' for exact matching.",
        evidence={"unmatched_rows": dropped, "rows": total,
                  "unmatched_keys": int(matching[N_UNMATCHED_KEYS].sum()),
                  "key_modes": sorted(set(matching[KEY_MODE].astype(str)))},
    )]
