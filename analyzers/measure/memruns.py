"""Runs of consecutive memory-bound kernels one fused kernel could replace, and what it would
still have to move.

A run is a maximal sequence of op calls whose kernels follow one another on one stream,
within one step, each memory-bound (roofline.py) and of a family a compiler fuses into one
pass over memory (elementwise, norms, softmax, reductions, copies, fills, foreach ops:
profkit.classify.traffic.FUSABLE), with no other kernel between them on that stream. The
kernels of one op call (a foreach op's chunks) are one unit: they do not feed each other. Fused, the run reads its external inputs
once and writes its final output once. Which inputs are external is not recorded (the trace
has shapes, not tensor identities), so each kernel's reads beyond the previous kernel's
output count as external, and the first kernel's reads all do:

    min_bytes = read_0 + sum_i max(0, read_i - write_(i-1)) + write_last

A tensor several kernels of the run read (a residual) counts once per reader, where the
fused kernel reads it once: the minimum is an upper bound, the saving a conservative one.
The fused kernel is assumed to reach the bandwidth the run reached on its estimated bytes,
so the saving is ``time x (1 - min_bytes / bytes)``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit import schema as S
from profkit.classify.opfamilies import FUSABLE
from profkit.columns import aggregate

TOP_RUN_OPS = 5


def fusion_runs(calls: pd.DataFrame, n_steps: int) -> dict:
    """Runs (module doc) among ``calls`` (kernel_costs with ``bound``), summed per step:
    {runs, kernels, ns, bytes, min_bytes, saving_ns, ops: [[op, ns], ...]}."""
    none = {"runs": 0.0, "kernels": 0.0, "ns": 0.0, "bytes": 0.0, "min_bytes": 0.0,
            "saving_ns": 0.0, "ops": []}
    if calls.empty:
        return none
    c = op_units(calls.sort_values([S.STREAM, S.TS_NS], kind="stable"))
    read, write = c["read_bytes"].to_numpy(), c["write_bytes"].to_numpy()
    ok = ((c["bound"] == "memory").to_numpy() & c["family"].isin(FUSABLE).to_numpy()
          & np.isfinite(read) & np.isfinite(write))
    stream, step = c[S.STREAM].to_numpy(), c[S.STEP].to_numpy()
    follows = np.zeros(len(c), dtype=bool)
    follows[1:] = ok[:-1] & (stream[1:] == stream[:-1]) & (step[1:] == step[:-1])
    follows &= ok
    run = np.cumsum(ok & ~follows) - 1
    side = read.copy()
    side[1:] = np.where(follows[1:], np.maximum(read[1:] - write[:-1], 0.0), read[1:])
    last = ok & ~np.append(follows[1:], False)  # the run's final kernel writes the result
    frame = pd.DataFrame({"run": run, "ns": c[S.DUR_NS].to_numpy(dtype=float),
                          "bytes": read + write, "min": side + np.where(last, write, 0.0),
                          "op": c["op"].to_numpy()})[ok]
    if frame.empty:
        return none
    frame["kernels"] = c["kernels"].to_numpy()[ok]
    runs = aggregate(frame.groupby("run"), dict(n=("ns", "size"), ns=("ns", "sum"),
                                                nbytes=("bytes", "sum"), min_bytes=("min", "sum"),
                                                kernels=("kernels", "sum")))
    runs = runs[runs["n"] >= 2]
    if runs.empty:
        return none
    saving = runs["ns"] * np.clip(1 - runs["min_bytes"] / runs["nbytes"].where(runs["nbytes"] > 0),
                                  0.0, 1.0)
    ops = frame[frame["run"].isin(runs.index)].groupby("op")["ns"].sum()
    ops = ops.sort_values(ascending=False).head(TOP_RUN_OPS)
    return {"runs": len(runs) / n_steps, "kernels": float(runs["kernels"].sum()) / n_steps,
            "ns": float(runs["ns"].sum()) / n_steps,
            "bytes": float(runs["nbytes"].sum()) / n_steps,
            "min_bytes": float(runs["min_bytes"].sum()) / n_steps,
            "saving_ns": float(saving.fillna(0.0).sum()) / n_steps,
            "ops": [[str(op or "(unknown op)"), float(ns) / n_steps] for op, ns in ops.items()]}


def op_units(calls: pd.DataFrame) -> pd.DataFrame:
    """Consecutive kernels (in ``calls``' order) of one op call merged into one row: time,
    bytes summed; the first kernel's other columns; ``kernels`` how many were merged."""
    c = calls.reset_index(drop=True)
    op_id = c["op_id"].to_numpy()
    same = np.zeros(len(c), dtype=bool)
    same[1:] = (op_id[1:] == op_id[:-1]) & (op_id[1:] >= 0) \
        & (c[S.STREAM].to_numpy()[1:] == c[S.STREAM].to_numpy()[:-1])
    unit = np.cumsum(~same) - 1
    sums = c.groupby(unit)[[S.DUR_NS, "read_bytes", "write_bytes"]].sum(min_count=1)
    out = c[~same].reset_index(drop=True)
    out[[S.DUR_NS, "read_bytes", "write_bytes"]] = sums.to_numpy()
    out["kernels"] = np.bincount(unit)
    return out
