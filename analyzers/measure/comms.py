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
from profkit.columns import values_in
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
    order) and each rank's host (numpy columns: :mod:`~profkit.analyzers.measure.comms_match`)."""
    from profkit.analyzers.measure import comms_match as M

    every = M.stack([rows for rows, _ in parts], ROW_DTYPES)
    M.assign_keys(every)
    ok, matching = M.match(every)
    r = {c: every[c][ok] for c in (*ROW_DTYPES, KEY)}
    offsets = _clock_offsets(hosts, r)
    off = offsets[OFFSET_NS].to_numpy()[np.searchsorted(offsets.index.to_numpy(), r[RANK])]
    r[START_NS] = r[START_NS] - off
    r[END_NS] = r[START_NS] + r[S.DUR_NS]
    key_code, keys = M.codes(r[KEY])
    by_key = M.Groups(key_code, len(keys))
    M.add_waits(r, M.stack([cover for _, cover in parts], COVER_DTYPES), off, by_key)
    coll = M.collective_table(r, by_key, keys)
    tables = {
        COLLECTIVES: coll,
        COLLECTIVE_WAITS: pd.DataFrame({c: r[c] for c in WAIT_TABLE_COLUMNS}),
        RANK_WAITS: M.rank_table(r, coll),
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


def rank_hosts(run_meta: dict, rank_metas: dict[int, dict]) -> dict[int, str | None]:
    """Each rank's host: run.json's ``ranks`` table, else the trace header's host name."""
    declared = run_meta.get("ranks") or {}
    hosts: dict[int, str | None] = {}
    for rank in sorted(rank_metas):
        info = declared.get(str(rank), declared.get(rank)) if isinstance(declared, dict) else None
        host = info.get("host") if isinstance(info, dict) else None
        hosts[rank] = host or rank_metas[rank].get("host") or None
    return hosts


def _clock_offsets(hosts: dict[int, str | None], r: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per rank of the matched rows ``r``: host and the offset (ns) to subtract, indexed by
    rank (see module doc)."""
    ranks = sorted(int(x) for x in np.unique(r[RANK]))
    table = pd.DataFrame({HOST: [hosts.get(x) or "" for x in ranks],
                          OFFSET_NS: np.zeros(len(ranks), dtype=np.int64)},
                         index=pd.Index(ranks, name=RANK, dtype="int64"))
    known = [hosts.get(x) for x in ranks]
    if not ranks or None in known or len(set(known)) < 2:
        return table
    rows = pd.DataFrame({c: r[c] for c in (RANK, S.COLL_NAME, START_NS, S.DUR_NS, KEY)})
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
    busy = ~values_in(gpu[S.CLASS], (S.CLS_COMMUNICATION,))
    start = gpu[S.TS_NS].to_numpy(np.int64)[busy]
    return intervals.union(start, start + gpu[S.DUR_NS].to_numpy(np.int64)[busy])
