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
from profkit.analyzers.result import Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit import intervals
from profkit import schema as S
from profkit.columns import aggregate, values_in
from profkit.model import RankData, Run

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
    parts = [rank_collectives(run.ranks[r]) for r in run.rank_ids]
    return match_collectives(parts, rank_hosts(run.meta, {r: d.meta for r, d in run.ranks.items()}))


def match_collectives(parts: list[tuple[pd.DataFrame, pd.DataFrame]],
                      hosts: dict[int, str | None]) -> Result:
    """:func:`analyze_collectives` from every rank's :func:`rank_collectives` (in rank
    order) and each rank's host."""
    rows = _stack([rows for rows, _ in parts], ROW_DTYPES)
    rows = _assign_keys(rows)
    rows, matching = _match(rows)
    offsets = _clock_offsets(hosts, rows)
    rows[START_NS] -= rows[RANK].map(offsets[OFFSET_NS]).fillna(0).astype(np.int64)
    rows[END_NS] = rows[START_NS] + rows[S.DUR_NS]
    rows = _add_waits(rows, _stack([cover for _, cover in parts], COVER_DTYPES), offsets[OFFSET_NS])
    coll = _collective_table(rows)
    tables = {
        COLLECTIVES: coll,
        COLLECTIVE_WAITS: rows[list(WAIT_TABLE_COLUMNS)].reset_index(drop=True),
        RANK_WAITS: _rank_table(rows, coll),
        MATCHING: matching,
        CLOCK_OFFSETS: offsets.reset_index()[list(OFFSET_TABLE_COLUMNS)],
    }
    return Result(tables=tables, facts={"topic": "collectives"})


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns})


ROW = "row"  # a collective's index among its rank's rows (start order)
COVER_START_NS, COVER_END_NS = "cover_start_ns", "cover_end_ns"
ROW_DTYPES = {RANK: "int64", ROW: "int64", S.COLL_NAME: object, PG: object, S.SEQ: "int64",
              S.COMMS_ID: object, S.GROUP_SIZE: "int64", S.STEP: "int64", START_NS: "int64",
              S.DUR_NS: "int64", S.MSG_BYTES: "float64", S.ON_GPU: bool}
COVER_DTYPES = {RANK: "int64", ROW: "int64", COVER_START_NS: "int64", COVER_END_NS: "int64"}


def rank_collectives(data: RankData) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One rank's share of the matching: its collectives (text columns as plain strings, in
    start order) and, for each one on the GPU, the rank's other GPU work (compute, memcpy,
    memset; merged) clipped to the collective's span, from which the reduce measures how
    much of a wait was hidden behind work."""
    c = data.collectives
    if c is None or c.empty:
        return _typed({}, ROW_DTYPES), _typed({}, COVER_DTYPES)
    order = np.argsort(c[S.TS_NS].to_numpy(np.int64), kind="stable")
    c = c.iloc[order]
    rows = pd.DataFrame({
        RANK: np.full(len(c), data.rank, dtype=np.int64), ROW: np.arange(len(c), dtype=np.int64),
        S.COLL_NAME: c[S.COLL_NAME].astype(str).to_numpy(),
        PG: c[S.PG_NAME].astype(str).to_numpy(), S.SEQ: c[S.SEQ].to_numpy(np.int64),
        S.COMMS_ID: c[S.COMMS_ID].astype(str).to_numpy(),
        S.GROUP_SIZE: c[S.GROUP_SIZE].to_numpy(np.int64), S.STEP: c[S.STEP].to_numpy(np.int64),
        START_NS: c[S.TS_NS].to_numpy(np.int64), S.DUR_NS: c[S.DUR_NS].to_numpy(np.int64),
        S.MSG_BYTES: c[S.MSG_BYTES].to_numpy(np.float64), S.ON_GPU: c[S.ON_GPU].to_numpy(bool)})
    on_gpu = rows[S.ON_GPU].to_numpy()
    start = rows[START_NS].to_numpy()[on_gpu]
    row, lo, hi = _clip_to_spans(_gpu_work(data), start, start + rows[S.DUR_NS].to_numpy()[on_gpu])
    cover = {RANK: np.full(len(row), data.rank, dtype=np.int64),
             ROW: rows[ROW].to_numpy()[on_gpu][row], COVER_START_NS: lo, COVER_END_NS: hi}
    return rows, _typed(cover, COVER_DTYPES)


def _typed(columns: dict, dtypes: dict) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(columns.get(c, []), dtype=t) for c, t in dtypes.items()})


def _clip_to_spans(work: intervals.Intervals, lo: np.ndarray,
                   hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pieces of a disjoint sorted interval set inside each span [lo_i, hi_i): (span index,
    piece start, piece end)."""
    starts, ends = work
    first = np.searchsorted(ends, lo, side="right")
    last = np.searchsorted(starts, hi, side="left")
    count = np.maximum(last - first, 0)
    span = np.repeat(np.arange(len(lo)), count)
    offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    k = np.repeat(first, count) + offset
    return span, np.maximum(starts[k], lo[span]), np.minimum(ends[k], hi[span])


def _stack(parts: list[pd.DataFrame], dtypes: dict) -> pd.DataFrame:
    """Every rank's frames in one (rank order, each rank's rows in start order)."""
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else _typed({}, dtypes)


def _assign_keys(rows: pd.DataFrame) -> pd.DataFrame:
    """Add KEY (the cross-rank join key) and KEY_MODE, chosen per process group."""
    rows = rows.copy()
    if rows.empty:  # string arithmetic on an empty string column fails on some pandas 3.0.x
        rows[KEY_MODE] = pd.Series([], dtype=object)
        rows[KEY] = pd.Series([], dtype=object)
        return rows
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


def rank_hosts(run_meta: dict, rank_metas: dict[int, dict]) -> dict[int, str | None]:
    """Each rank's host: run.json's ``ranks`` table, else the trace header's host name."""
    declared = run_meta.get("ranks") or {}
    hosts: dict[int, str | None] = {}
    for rank in sorted(rank_metas):
        info = declared.get(str(rank), declared.get(rank)) if isinstance(declared, dict) else None
        host = info.get("host") if isinstance(info, dict) else None
        hosts[rank] = host or rank_metas[rank].get("host") or None
    return hosts


def _clock_offsets(hosts: dict[int, str | None], rows: pd.DataFrame) -> pd.DataFrame:
    """Per rank: host and the offset (ns) to subtract, indexed by rank (see module doc)."""
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


def _gpu_work(data: RankData) -> intervals.Intervals:
    """Union of the rank's non-communication GPU work (compute, memcpy, memset)."""
    gpu = data.gpu_events
    busy = gpu[~values_in(gpu[S.CLASS], (S.CLS_COMMUNICATION,))]
    start = busy[S.TS_NS].to_numpy(np.int64)
    return intervals.union(start, start + busy[S.DUR_NS].to_numpy(np.int64))


def _add_waits(rows: pd.DataFrame, cover: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """Each row's wait (latest start - its start) and exposed wait: the wait minus the other
    GPU work the rank ran during it, up to the end of its own collective (after that its
    collective was over and nothing of it was waiting)."""
    latest = rows.groupby(KEY, sort=False)[START_NS].transform("max").to_numpy()
    rows = rows.copy()
    rows[WAIT_NS] = latest - rows[START_NS].to_numpy()
    # Cover pieces are on the loader's clock: undo the estimated offset for the bound.
    off = rows[RANK].map(offsets).fillna(0).to_numpy(np.int64)
    bound = pd.Series(np.minimum(latest + off, rows[START_NS].to_numpy() + off
                                 + rows[S.DUR_NS].to_numpy()),
                      index=pd.MultiIndex.from_arrays([rows[RANK], rows[ROW]]))
    upto = bound.reindex(pd.MultiIndex.from_arrays([cover[RANK], cover[ROW]])).to_numpy()
    ok = ~np.isnan(upto)
    piece = np.maximum(np.minimum(cover[COVER_END_NS].to_numpy()[ok], upto[ok])
                       - cover[COVER_START_NS].to_numpy()[ok], 0)
    hidden = pd.Series(piece, dtype="float64").groupby(
        [cover[RANK].to_numpy()[ok], cover[ROW].to_numpy()[ok]]).sum()
    key = pd.MultiIndex.from_arrays([rows[RANK], rows[ROW]])
    hidden_ns = hidden.reindex(key).fillna(0).to_numpy(np.int64) if len(hidden) else 0
    rows[EXPOSED_WAIT_NS] = rows[WAIT_NS].to_numpy() - hidden_ns
    return rows


def _collective_table(rows: pd.DataFrame) -> pd.DataFrame:
    if rows.empty:
        return _empty(COLLECTIVE_TABLE_COLUMNS)
    g = rows.groupby(KEY, sort=False)
    t = aggregate(g, {S.COLL_NAME: (S.COLL_NAME, "first"), PG: (PG, "first"),
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


