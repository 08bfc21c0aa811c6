"""What the host did while the GPU waited on its host work, and advice that fits it.

Host work before a step's first GPU op, where that op copies the step's input to the GPU, is
input preparation: a DataLoader's workers can take it over. Host work among the step's launches is not: it is Python, dispatch, autograd, the
optimizer or code in a range the user named, and DataLoader workers would not touch it. The
split comes from :mod:`profkit.analyzers.measure.hostwork` (``host_work_where``), the code
from the breakdown's ``idle_code`` labels of the part; issue 40 (DataLoader advice given to a
dispatcher-bound loop).
"""

from __future__ import annotations

import pandas as pd
from profkit.analyzers.units import pct

PART = "host_work"
MOST = 0.5  # a kind holding this share of the host work names it
TOP_CODE = 3
UNRECORDED_PREFIX = "(Python between recorded ops"
OPTIMIZER_LABEL = "Optimizer."

INPUT_ADVICE = (
    "The host prepares the step's input before copying it to the GPU, the step's first GPU "
    "op ({share} of this host work{code}): run that work in DataLoader workers (num_workers>0, pin_memory=True, "
    "persistent_workers=True) so that it overlaps the GPU's work, or move it onto the GPU "
    "(transforms on the GPU after copying the raw batch).")
HEAD_ADVICE = (
    "The host works before the step's first GPU op, which is no copy of an input ({share} "
    "of this host work{code}): the GPU has nothing to do until it is done. Make it cheaper, "
    "run it less often, or overlap it with GPU work (launch the step's work first, or move "
    "it to another thread or process).")
OPTIMIZER_ADVICE = (
    "The host works in the optimizer ({share} of this host work{code}): keep the parameters "
    "and the optimizer state on the GPU and use a fused or foreach optimizer (e.g. "
    "torch.optim.AdamW(fused=True)), a few kernels per step instead of a host loop over the "
    "parameters, or compile the optimizer step (torch.compile).")
NAMED_ADVICE = (
    "The host works inside ranges the code names ({share} of this host work{code}): what "
    "runs there holds the GPU. Shorten it, run it less often, or overlap it (another thread "
    "or process, or launch the next GPU work first).")
BETWEEN_ADVICE = (
    "The host works between the step's own launches ({share} of this host work{code}): "
    "Python between ops, PyTorch dispatch and autograd bookkeeping of ops that launch "
    "nothing, tensor-subclass (DTensor) redistribution, hooks. Make fewer, larger ops "
    "(torch.compile: one compiled graph instead of many eager ops; a larger batch per "
    "step), or run that work less often.")
UNRECORDED_ADVICE = (" Most of it is Python the trace does not name: capture with "
                     "with_stack=True to see where.")


def host_work_evidence(rank: int, where: pd.DataFrame | None, code: pd.DataFrame | None,
                       steps_used: int) -> tuple[dict, str]:
    """(evidence, advice) for ``rank``'s host-work finding: the shares of its host work
    before the step's first GPU op, in the optimizer, in named ranges and among the
    launches, and the advice of the kind that holds most of it; ({}, "") without the split."""
    row = _row(where, rank)
    if row is None or row["host_work_ns"] <= 0:
        return {}, ""
    total = float(row["host_work_ns"])
    shares = {"input": row["input_ns"] / total,
              "before_first_op": (row["head_ns"] - row["input_ns"]) / total,
              "optimizer": row["optimizer_ns"] / total,
              "named_ranges": row["annotated_ns"] / total}
    shares["between_launches"] = max(0.0, 1.0 - sum(shares.values()))
    kind, template = _kind(shares)
    top = _top_code(code, rank, max(steps_used, 1), kind)
    code_text = "; ".join(f"{_short(c)} ({ms:.2f} ms/step)" for c, ms in top)
    share = shares["input"] + shares["before_first_op"] if kind == "before_first_op" \
        else shares[kind]
    advice = template.format(share=pct(share),
                             code=f": {code_text}" if code_text else "")
    unrecorded = sum(ms for c, ms in top if c.startswith(UNRECORDED_PREFIX))
    if kind == "between_launches" and unrecorded > 0.5 * sum(ms for _, ms in top):
        advice += UNRECORDED_ADVICE
    evidence = {"host_work_kind": kind,
                "host_work_shares": {k: round(v, 3) for k, v in shares.items()}}
    if code_text:
        evidence["host_work_code"] = code_text
    return evidence, advice


def _kind(shares: dict[str, float]) -> tuple[str, str]:
    """The kind of host work advised on: input preparation where most of it comes before
    the step's first GPU op and that op copies the input to the GPU; else host work before a
    first op of another kind, the optimizer or named ranges where they hold most; else the
    work among the launches."""
    head = shares["input"] + shares["before_first_op"]
    if head >= MOST:
        return ("input", INPUT_ADVICE) if shares["input"] >= MOST else \
            ("before_first_op", HEAD_ADVICE)
    for kind, template in (("optimizer", OPTIMIZER_ADVICE), ("named_ranges", NAMED_ADVICE)):
        if shares[kind] >= MOST:
            return kind, template
    return "between_launches", BETWEEN_ADVICE


def _row(where: pd.DataFrame | None, rank: int) -> dict | None:
    if where is None or where.empty:
        return None
    mine = where[where["rank"] == rank]
    return mine.iloc[0].to_dict() if len(mine) else None


def _top_code(code: pd.DataFrame | None, rank: int, steps_used: int,
              kind: str) -> list[tuple[str, float]]:
    """The largest idle_code labels of the rank's host work of ``kind`` (the optimizer's, a
    named range's, the rest's): (label, ms per step)."""
    if code is None or code.empty:
        return []
    mine = code[(code["rank"] == rank) & (code["part"] == PART)]
    labels = mine["code"].astype(str)
    optimizer = labels.str.contains(OPTIMIZER_LABEL, regex=False)
    if kind == "optimizer":
        mine = mine[optimizer]
    elif kind == "named_ranges":
        mine = mine[~labels.str.startswith(UNRECORDED_PREFIX) & ~optimizer]
    elif kind == "between_launches":
        mine = mine[~optimizer]
    mine = mine.nlargest(TOP_CODE, "idle_ns")
    return [(str(r["code"]), float(r["idle_ns"]) / steps_used / 1e6)
            for r in mine.to_dict("records")]


def _short(label: str) -> str:
    return "Python between recorded ops" if label.startswith(UNRECORDED_PREFIX) else label
