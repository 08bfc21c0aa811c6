"""Fusion candidates: the same short kernels following one another on a stream."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.npgroups import group_table
from profkit.analyzers.measure.tables import RANK, empty, kernels_of, name_mask

from profkit import schema as S
from profkit.columns import aggregate, unique_rows
from profkit.model import RankData

FUSION_COLUMNS = ("sequence", "n", "count", "per_step", "total_ns", "ranks")
SEQUENCE_SEP = " -> "


def rank_ngrams(rd: RankData, short_ns: int, n: int = 3) -> pd.DataFrame:
    """Counts of n consecutive short kernels on one stream, by their names, among the kernels
    a compiler could fuse (elementwise and reductions; not library sorts, scans or GEMMs)."""
    k = kernels_of(rd).sort_values([S.STREAM, S.TS_NS], kind="stable")
    fusable = k[S.SUBCLASS].isin(FUSABLE_SUBCLASSES).to_numpy() & ~name_mask(k[S.NAME],
                                                                             NOT_FUSABLE_RE)
    m = len(k) - n + 1
    if m <= 0:
        return pd.DataFrame(columns=["sequence", "count", "total_ns"])
    codes = k[S.NAME].cat.codes.to_numpy()
    names = np.asarray(k[S.NAME].cat.categories, dtype=object)
    stream, dur = k[S.STREAM].to_numpy(), k[S.DUR_NS].to_numpy()
    ok = np.ones(m, dtype=bool)
    for i in range(n):
        ok &= (dur[i:i + m] < short_ns) & (stream[i:i + m] == stream[:m]) & fusable[i:i + m]
    grams = np.stack([codes[i:i + m] for i in range(n)], axis=1)[ok]
    total = sum(dur[i:i + m] for i in range(n))[ok]
    if len(grams) == 0:
        return pd.DataFrame(columns=["sequence", "count", "total_ns"])
    uniq, inverse, count = unique_rows(list(grams.T))
    sums = np.bincount(inverse, weights=total, minlength=len(uniq))
    seq = [SEQUENCE_SEP.join(names[row]) for row in uniq]
    return pd.DataFrame({"sequence": seq, "count": count, "total_ns": sums.astype(np.int64)})


FUSABLE_SUBCLASSES = ("elementwise", "reduction")
NOT_FUSABLE_RE = re.compile(r"sort|radix|cub::|scan|topk|unique|nonzero|embedding_bag",
                            re.IGNORECASE)


def fusion_candidates(grams: list[pd.DataFrame], n_steps: int, top_n: int,
                      n: int = 3) -> pd.DataFrame:
    """The most frequent n-grams over every rank's :func:`rank_ngrams` (with a rank column);
    ``n_steps``: the ranks' profiled steps together."""
    grams = pd.concat(grams, ignore_index=True) if grams else pd.DataFrame()
    if grams.empty:
        return empty(FUSION_COLUMNS)
    spec = dict(count=("count", "sum"), total_ns=("total_ns", "sum"), ranks=(RANK, "nunique"))
    out = group_table(grams, ["sequence"], spec)
    if out is None:
        out = aggregate(grams.groupby("sequence"), spec).reset_index()
    out["per_step"] = out["count"] / n_steps if n_steps else np.nan
    out["n"] = n
    out = out.sort_values(["count", "total_ns"], ascending=False, kind="stable").head(top_n)
    return out[list(FUSION_COLUMNS)].reset_index(drop=True)
