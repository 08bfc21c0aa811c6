"""comm._launch_collectives and comm's range names against their definitions, on random
synthetic events: for each correlation, the collective of the innermost communication range
(the one starting last, of equal starts the later row) holding its last launch call on the
same thread; and per distinct name, columns.category_mask of comm's FoldedPattern as
re.search of its text in any case."""

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify import comm
from profkit.classify.events import collective_kind
from profkit.columns import category_mask

NAMES = ["dispatch(F)", "combine(B)", "AllReduce grads", "all_gather", "nccl:all_reduce",
         "reduce_scatter x", "alltoall", "Redispatch", "aten::mm", "c10d::broadcast_"]


def _events(rng, n: int) -> pd.DataFrame:
    return pd.DataFrame({
        S.TS_NS: rng.integers(0, 200, n), S.DUR_NS: rng.integers(0, 80, n),
        S.PID: rng.integers(0, 2, n), S.TID: rng.integers(0, 2, n),
        S.NAME: pd.Categorical.from_codes(rng.integers(-1, len(NAMES), n), categories=NAMES),
        S.CORRELATION: rng.integers(0, 12, n)})


def _expected(ev: pd.DataFrame, ranges: np.ndarray, launches: np.ndarray) -> dict:
    ts, dur, names = ev[S.TS_NS].to_numpy(), ev[S.DUR_NS].to_numpy(), ev[S.NAME]
    thread = list(zip(ev[S.PID].tolist(), ev[S.TID].tolist()))
    found = {}  # correlation -> (thread, ts, row) of its last call inside a range, and kind
    for row in launches.tolist():
        holding = [r for r in ranges.tolist() if thread[r] == thread[row]
                   and ts[r] <= ts[row] <= ts[r] + dur[r]]
        if not holding:
            continue
        inner = max(holding, key=lambda r: (ts[r], r))
        key = (thread[row], ts[row], row)
        corr = int(ev[S.CORRELATION].iloc[row])
        if corr not in found or found[corr][0] < key:
            found[corr] = (key, collective_kind(names.iloc[inner]))
    return {c: kind for c, (_, kind) in found.items()}


def test_launch_collectives_as_defined():
    rng = np.random.default_rng(7)
    seen = 0
    for trial in range(150):
        ev = _events(rng, int(rng.integers(1, 40)))
        is_range = rng.random(len(ev)) < 0.4
        ranges = np.flatnonzero(is_range & (ev[S.NAME].cat.codes.to_numpy() >= 0))
        launches = np.flatnonzero(~is_range)
        corr, kind = comm._launch_collectives(ev, ranges, launches)
        assert list(corr) == sorted(set(corr.tolist()))
        want = _expected(ev, ranges, launches)
        assert dict(zip(corr.tolist(), kind.tolist())) == want, trial
        seen += len(want)
    assert seen > 300  # many correlations were found inside ranges


def test_category_mask_searches_a_folded_pattern_as_its_text_in_any_case():
    """columns.category_mask takes comm's FoldedPattern as it takes a compiled pattern: the
    same rows as the pattern's text searched in any case, alone and or-ed with COMM_OP_RE
    (the ranges rule 2 reads)."""
    rng = np.random.default_rng(8)
    ev = _events(rng, 300)
    folded = f"(?i:{comm.COMM_RANGE_RE.pattern})"
    names = ev[S.NAME]
    by_text = category_mask(names, folded)
    assert 0 < by_text.sum() < len(ev)
    assert (category_mask(names, comm._RANGE) == by_text).all()
    either = category_mask(names, comm._RANGE) | category_mask(names, comm.classify.COMM_OP_RE)
    want = category_mask(names, f"{folded}|{comm.classify.COMM_OP_RE.pattern}")
    assert want.sum() > by_text.sum() and (either == want).all()
