"""The cross-rank matching of :mod:`~profkit.analyzers.measure.comms` on numpy columns.

What :func:`~profkit.analyzers.measure.comms.match_collectives` computes (its module doc
says how keys, clocks, waits and bandwidths are defined), with one grouping per key instead
of a pandas groupby per figure: the reduce runs on the main process's critical path, and on
a run's few hundred collectives pandas' fixed cost per call was most of its time. The tables
and their dtypes are those the pandas version gave.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure import comms as C
from profkit.analyzers.measure.npgroups import Groups, codes, cumcount, ints_as_text

from profkit import schema as S
from profkit.columns import sorted_lookup, unique_rows

_COLUMNS = (C.RANK, C.ROW, S.COLL_NAME, C.PG, S.SEQ, S.COMMS_ID, S.GROUP_SIZE, S.STEP,
            C.START_NS, S.DUR_NS, S.MSG_BYTES, S.ON_GPU)


def stack(parts: list[pd.DataFrame], dtypes: dict) -> dict[str, np.ndarray]:
    """Every rank's frame as numpy columns, in one (rank order, each rank's rows in order)."""
    parts = [p for p in parts if len(p)]
    out = {}
    for c, t in dtypes.items():
        dtype = object if t is object else np.dtype(t)
        out[c] = (np.concatenate([p[c].to_numpy(dtype) for p in parts]) if parts
                  else np.empty(0, dtype=dtype))
    return out


def assign_keys(r: dict[str, np.ndarray]) -> None:
    """KEY and KEY_MODE of every row, chosen per process group (comms module doc)."""
    n = len(r[C.RANK])
    pg_code, pgs = codes(r[C.PG])
    by_pg = Groups(pg_code, len(pgs))
    has_seq = (by_pg.min(r[S.SEQ]) >= 0)[pg_code]
    has_id = by_pg.all(r[S.COMMS_ID] != "")[pg_code] & ~has_seq
    rest = ~has_seq & ~has_id
    base = np.empty(n, dtype=object)
    pg = r[C.PG]
    base[has_seq] = pg[has_seq] + "/seq " + ints_as_text(r[S.SEQ][has_seq])
    base[has_id] = "id " + r[S.COMMS_ID][has_id]
    if rest.any():
        name = r[S.COLL_NAME][rest]
        name_code, names = codes(name)
        invariant = np.array([x in C.SIZE_INVARIANT for x in names], dtype=bool)[name_code]
        nbytes = r[S.MSG_BYTES][rest]
        size = np.full(len(name), "*", dtype=object)
        size[invariant] = ints_as_text(np.where(np.isnan(nbytes), -1, nbytes)
                                  .astype(np.int64)[invariant])
        base[rest] = (pg[rest] + "/" + name + "/step " + ints_as_text(r[S.STEP][rest]) + "/"
                      + size + " B")
    mode = np.full(n, "occurrence", dtype=object)
    mode[has_seq], mode[has_id] = "seq", "comms_id"
    rank_code, ranks = codes(r[C.RANK])
    base_code, bases = codes(base)
    occurrence = cumcount(rank_code * max(len(bases), 1) + base_code)
    r[C.KEY_MODE], r[C.KEY] = mode, base + " #" + ints_as_text(occurrence)
    r["_pg"], r["_rank"], r["_pgs"] = pg_code, rank_code, pgs


def match(r: dict[str, np.ndarray]) -> tuple[np.ndarray, pd.DataFrame]:
    """The rows whose key is present once on every rank of its process group (at least
    two), and the ``matching`` table of each process group's counts."""
    pg_code, rank_code, pgs = r["_pg"], r["_rank"], r["_pgs"]
    key_code, keys = codes(r[C.KEY])
    pair_pg = unique_rows([pg_code, rank_code])[0][:, 0]  # the pg of each (pg, rank)
    members_pg = np.bincount(pair_pg, minlength=len(pgs))
    members = members_pg[pg_code]
    ok = (np.bincount(key_code, minlength=len(keys))[key_code] == members) & (members >= 2)
    if not len(pg_code):
        return ok, C._empty(C.MATCHING_TABLE_COLUMNS)

    def keys_per_pg(rows: np.ndarray) -> np.ndarray:
        return np.bincount(unique_rows([pg_code[rows], key_code[rows]])[0][:, 0],
                           minlength=len(pgs))

    mode = Groups(pg_code, len(pgs)).first(r[C.KEY_MODE])
    order = sorted(range(len(pgs)), key=lambda i: (pgs[i], mode[i]))
    table = pd.DataFrame({
        C.PG: pgs.astype(object)[order], C.KEY_MODE: mode[order],
        C.N_RANKS: members_pg[order], C.N_ROWS: np.bincount(pg_code, minlength=len(pgs))[order],
        C.N_MATCHED: keys_per_pg(ok)[order], C.N_UNMATCHED_KEYS: keys_per_pg(~ok)[order],
        C.N_UNMATCHED_ROWS: np.bincount(pg_code[~ok], minlength=len(pgs))[order]})
    return ok, table


def add_waits(r: dict[str, np.ndarray], cover: dict[str, np.ndarray], off: np.ndarray,
              by_key: Groups) -> None:
    """WAIT_NS and EXPOSED_WAIT_NS of every matched row (comms._add_waits's definition):
    the cover pieces are on the loader's clock, so the bound undoes the estimated offset."""
    start = r[C.START_NS]
    latest = by_key.max(start)[by_key.group]
    r[C.WAIT_NS] = latest - start
    bound = np.minimum(latest + off, start + off + r[S.DUR_NS])
    span = int(max(r[C.ROW].max(initial=0), cover[C.ROW].max(initial=0))) + 1
    row_key = r[C.RANK] * span + r[C.ROW]
    order = np.argsort(row_key, kind="stable")
    piece_key = cover[C.RANK] * span + cover[C.ROW]
    row = sorted_lookup(row_key, piece_key, order)
    found = row >= 0
    row = row[found]
    upto = bound[row]
    if not found.all():  # as the pandas version's reindex: floats once any piece is left out
        upto = upto.astype(np.float64)
    piece = np.maximum(np.minimum(cover[C.COVER_END_NS][found], upto)
                       - cover[C.COVER_START_NS][found], 0)
    # integer-valued pieces: their float sums are exact in any order (pandas' Kahan sums)
    hidden = np.bincount(row, weights=piece, minlength=len(start)).astype(np.int64)
    r[C.EXPOSED_WAIT_NS] = r[C.WAIT_NS] - hidden


def collective_table(r: dict[str, np.ndarray], g: Groups, keys: np.ndarray) -> pd.DataFrame:
    """One row per matched collective, in start order (comms._collective_table's)."""
    if not len(r[C.RANK]):
        return C._empty(C.COLLECTIVE_TABLE_COLUMNS)
    start, end = r[C.START_NS], r[C.END_NS]
    first_start, last_start = g.min(start), g.max(start)
    first_end, last_end = g.min(end), g.max(end)
    name, gsize = g.first(r[S.COLL_NAME]), g.max(r[S.GROUP_SIZE])
    nbytes, latency_ns = g.fmax(r[S.MSG_BYTES]), g.min(r[S.DUR_NS])
    skew = last_start - first_start
    last = np.where(skew > 0, r[C.RANK][g.first_max_row(start)], -1)
    latency = latency_ns.astype(np.float64)
    algbw = nbytes / np.where(latency > 0, latency, np.nan)
    n = np.where(gsize > 0, gsize, g.size)
    t = {C.KEY: keys.astype(object), S.COLL_NAME: name, C.PG: g.first(r[C.PG]),
         C.N_RANKS: g.size.astype(np.int64), S.GROUP_SIZE: gsize, S.MSG_BYTES: nbytes,
         C.LATENCY_NS: latency_ns, C.ALGBW_GBPS: algbw,
         C.BUSBW_GBPS: algbw * C.busbw_factor(name, n), C.START_SKEW_NS: skew,
         C.END_SKEW_NS: last_end - first_end, C.LAST_RANK: last, S.STEP: g.max(r[S.STEP]),
         C.START_NS: first_start, S.ON_GPU: g.all(r[S.ON_GPU])}
    order = np.argsort(first_start, kind="stable")
    return pd.DataFrame({c: t[c][order] for c in C.COLLECTIVE_TABLE_COLUMNS})


def rank_table(r: dict[str, np.ndarray], coll: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: its waits, per step, and how often it arrived last."""
    if not len(r[C.RANK]):
        return C._empty(C.RANK_TABLE_COLUMNS)
    steps = coll[S.STEP].to_numpy()
    n_steps = len(np.unique(steps[steps >= 0]))
    code, ranks = codes(r[C.RANK])
    order = np.argsort(ranks, kind="stable")  # groupby(RANK) sorts the ranks
    where = np.empty(len(ranks), dtype=np.int64)
    where[order] = np.arange(len(ranks))
    g = Groups(where[code], len(ranks))
    in_step = (r[S.STEP] >= 0).astype(np.int64)
    t = {C.RANK: ranks[order].astype(np.int64), C.N_COLLECTIVES: g.size.astype(np.int64),
         C.WAIT_NS: g.sum(r[C.WAIT_NS]), C.EXPOSED_WAIT_NS: g.sum(r[C.EXPOSED_WAIT_NS])}
    for col, out in ((C.WAIT_NS, C.WAIT_NS_PER_STEP),
                     (C.EXPOSED_WAIT_NS, C.EXPOSED_WAIT_NS_PER_STEP)):
        total = g.sum(r[col] * in_step)
        t[out] = total / n_steps if n_steps else np.full(len(ranks), np.nan)
    last = coll[C.LAST_RANK].to_numpy()
    t[C.N_LAST] = _counts(last, t[C.RANK])
    t[C.LAST_SHARE] = t[C.N_LAST] / t[C.N_COLLECTIVES]
    return pd.DataFrame({c: t[c] for c in C.RANK_TABLE_COLUMNS})


def _counts(values: np.ndarray, of: np.ndarray) -> np.ndarray:
    """How often each of the sorted distinct ``of`` occurs in ``values`` (as int64)."""
    values = np.sort(values)
    return (np.searchsorted(values, of, side="right")
            - np.searchsorted(values, of, side="left")).astype(np.int64)
