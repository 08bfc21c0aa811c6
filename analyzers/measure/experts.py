"""Expert parallelism: the tokens each rank receives in its all-to-all dispatch, and whether a
straggler's extra compute follows them (expert load imbalance).

A mixture-of-experts layer sends each token to the rank holding its expert (an all-to-all,
the dispatch), runs the experts on what each rank received, and sends the results back (the
combine). PyTorch's ``record_param_comms`` writes each all-to-all's received elements ("Out
msg nelems", the sum of its "Out split size") and ``c10d::alltoall_base_``'s shapes give the
row width (the output tensor is ``[rows, width]``), so rows received = tokens received. The
dispatch is the all-to-all whose received counts differ most across ranks; a balanced
combine returns every rank its own tokens.

The model of a balanced step: expert compute grows with the tokens a rank receives, so a
rank's compute per step is fitted as ``a + b * tokens`` over the ranks (least squares); were
every rank to receive the mean, every rank would compute ``a + b * mean``, and the step would
shorten by what the most loaded rank computes beyond that (never more than the others wait
for it). On 2 x H200 (samples/runs/parallel/experts_skew, rank 0 receiving 98,304 tokens and
rank 1 32,768) this gives 9.5 ms of a 34.1 ms step (28%); the balanced twin measured 24.0 ms
against 35.5 ms (-32%).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from profkit.analyzers.measure.stragglers import COMPUTE_NS_PER_STEP, STRAGGLER, STRAGGLERS
from profkit.analyzers.result import Result

from profkit import schema as S
from profkit.model import RankData

TOPIC = "experts"
A2A_OP = "c10d::alltoall_base_"
MIN_A2A_BYTES = 1 << 20  # below this an all-to-all carries split counts, not tokens
MIN_IMBALANCE = 1.1  # received max / mean of the dispatch below which routing is balanced
MIN_FIT_CORR = 0.8  # compute must follow tokens at least this closely (Pearson, > 2 ranks)
RANK, STEP_COL, ORDER = "rank", "step", "order"
RECV_ELEMS, RECV_BYTES, RECV_TOKENS = "recv_elems", "recv_bytes", "recv_tokens"
TOKENS_TABLE = "expert_tokens"


def _row_widths(data: RankData) -> pd.DataFrame:
    """(start ns, end ns, elements per row of the received tensor) of each alltoall_base_ op."""
    ev = data.events
    ops = ev[ev[S.NAME] == A2A_OP]
    widths = []
    for dims in ops[S.INPUT_DIMS].astype(str):
        try:
            out = json.loads(dims)[0] if dims else []
        except (ValueError, IndexError, TypeError):
            out = []
        widths.append(float(np.prod(out[1:])) if len(out) >= 2 else np.nan)
    return pd.DataFrame({"start": ops[S.TS_NS].to_numpy(np.int64),
                         "end": (ops[S.TS_NS] + ops[S.DUR_NS]).to_numpy(np.int64),
                         "width": widths}).sort_values("start")


def rank_all_to_all(data: RankData, used_steps: dict[int, int] | None) -> pd.DataFrame:
    """One row per all-to-all carrying tokens in the used steps: its step, its order in the
    step, the elements, bytes and (where the shapes say the row width) tokens it received."""
    coll = data.collectives
    a2a = coll[(coll[S.COLL_NAME] == "all_to_all") & (coll[S.MSG_BYTES] >= MIN_A2A_BYTES)]
    if used_steps is not None:
        a2a = a2a[a2a[S.STEP].isin(list(used_steps))]
    if a2a.empty:
        return pd.DataFrame(columns=[STEP_COL, ORDER, RECV_ELEMS, RECV_BYTES, RECV_TOKENS])
    a2a = a2a.sort_values(S.TS_NS)
    elem_bytes = [S.DTYPE_BYTES.get(str(d).lower(), np.nan) for d in a2a[S.DTYPE]]
    out = pd.DataFrame({STEP_COL: a2a[S.STEP].to_numpy(np.int64),
                        RECV_ELEMS: a2a[S.OUT_NELEMS].to_numpy(float),
                        "cpu": a2a[S.CPU_TS_NS].to_numpy(np.int64)})
    out[RECV_BYTES] = out[RECV_ELEMS] * np.asarray(elem_bytes, float)
    out[ORDER] = out.groupby(STEP_COL).cumcount()
    out[RECV_TOKENS] = np.nan
    ops = _row_widths(data)
    if len(ops):
        idx = np.searchsorted(ops["start"].to_numpy(), out["cpu"].to_numpy(), side="right") - 1
        ok = (idx >= 0) & (out["cpu"].to_numpy() >= 0)
        inside = np.zeros(len(out), bool)
        inside[ok] = out["cpu"].to_numpy()[ok] <= ops["end"].to_numpy()[idx[ok]]
        width = np.full(len(out), np.nan)
        width[inside] = ops["width"].to_numpy()[idx[inside]]
        out[RECV_TOKENS] = out[RECV_ELEMS] / width
    return out[[STEP_COL, ORDER, RECV_ELEMS, RECV_BYTES, RECV_TOKENS]].reset_index(drop=True)


def tokens_per_rank(values: dict[int, pd.DataFrame | None]) -> pd.DataFrame:
    """Per rank, what it receives in the dispatch (the all-to-all, by its order in the step,
    whose received elements differ most across ranks; median over the steps): tokens, bytes,
    and the dispatch's imbalance (max / mean over the ranks). Empty: no all-to-all with
    tokens, or ranks that do not run the same all-to-alls."""
    frames = [v.assign(**{RANK: r}) for r, v in values.items() if v is not None and len(v)]
    if len(frames) < 2:
        return pd.DataFrame()
    calls = pd.concat(frames, ignore_index=True)
    per_call = calls.pivot_table(index=[STEP_COL, ORDER], columns=RANK, values=RECV_ELEMS)
    per_call = per_call.dropna()
    if per_call.empty:
        return pd.DataFrame()
    spread = (per_call.max(axis=1) / per_call.mean(axis=1)).groupby(level=ORDER).median()
    dispatch = int(spread.idxmax())
    picked = calls[calls[ORDER] == dispatch].groupby(RANK)[[RECV_TOKENS, RECV_BYTES]].median()
    picked["imbalance"] = float(spread.max())
    picked["dispatch_order"] = dispatch
    return picked.reset_index()


def expert_balance(values: dict[int, pd.DataFrame | None], stragglers: Result) -> Result:
    """The tokens table, and where a straggler receives the most tokens and the ranks' compute
    follows their tokens, the facts of expert load imbalance with a balanced step's saving."""
    table = tokens_per_rank(values)
    if table.empty:
        return Result()
    facts = {"topic": TOPIC, "imbalance": float(table["imbalance"].iloc[0])}
    late = stragglers.tables.get(STRAGGLERS, pd.DataFrame())
    if late.empty:
        return Result(tables={TOKENS_TABLE: table}, facts=facts)
    joined = table.merge(late, left_on=RANK, right_on="rank")
    slow = joined[joined[STRAGGLER].astype(bool)]
    if slow.empty or facts["imbalance"] < MIN_IMBALANCE:
        return Result(tables={TOKENS_TABLE: table}, facts=facts)
    return Result(tables={TOKENS_TABLE: table}, facts={**facts, **_balanced(joined, slow)})


def _balanced(joined: pd.DataFrame, slow: pd.DataFrame) -> dict:
    """The straggler whose compute follows the tokens it receives, and what a step saves when
    every rank receives the mean ({} when its compute does not follow them)."""
    x = joined[RECV_TOKENS].to_numpy(float)
    if not np.isfinite(x).all():
        x = joined[RECV_BYTES].to_numpy(float)
    y = joined[COMPUTE_NS_PER_STEP].to_numpy(float)
    row = slow.sort_values("others_exposed_wait_ns_per_step").iloc[-1]
    if not (np.isfinite(y).all() and np.isfinite(x).all()) or np.ptp(x) <= 0:
        return {}
    most = joined["rank"].to_numpy()[np.argmax(x)]
    corr = np.corrcoef(x, y)[0, 1] if len(x) > 2 else np.sign((x[1] - x[0]) * (y[1] - y[0]))
    if most != row["rank"] or not corr >= MIN_FIT_CORR:
        return {}
    b, a = np.polyfit(x, y, 1)
    mine = float(y[joined["rank"].to_numpy() == row["rank"]][0])
    saving = min(max(mine - (a + b * x.mean()), 0.0), float(row["others_exposed_wait_ns_per_step"]))
    return {"straggler": int(row["rank"]), "saving_ns_per_step": saving,
            "step_ns": float(row["others_step_ns"]), "compute_ns_per_step": mine,
            "balanced_compute_ns_per_step": float(a + b * x.mean()),
            "mean_received": float(x.mean()), "ns_per_received": float(b),
            "received_in": "tokens" if np.isfinite(joined[RECV_TOKENS]).all() else "bytes"}
