"""Expert load imbalance: a straggler whose extra compute follows the tokens its experts
receive in the all-to-all dispatch (:mod:`profkit.analyzers.measure.experts`).

One cause, one finding: the straggler finding of the same rank folds into this one
(:func:`fold_straggler`), its figures kept as evidence. Its saving (the others' whole wait)
would assume the straggler's extra work vanishes; balancing the routing moves it to the
other ranks instead, so the saving is the balanced step's (the module's model).
"""

from __future__ import annotations

from dataclasses import replace

from profkit.analyzers import units as U
from profkit.analyzers.measure.experts import RANK, RECV_BYTES, RECV_TOKENS, TOKENS_TABLE
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

CATEGORY = "expert_imbalance"
ADVICE = (
    "Balance the routing: add (or raise the weight of) the router's load-balancing auxiliary "
    "loss, or use aux-loss-free bias balancing; cap each expert's tokens with a capacity "
    "factor (dropping or rerouting the overflow); place hot experts on separate ranks or "
    "replicate them across ranks.")


def _amount(row: dict) -> str:
    tokens = row.get(RECV_TOKENS)
    if tokens is not None and tokens == tokens:
        return f"{tokens:,.0f} tokens"
    return U.size(row[RECV_BYTES])


def expert_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """One finding for a straggler whose compute follows the tokens it receives."""
    facts = result.facts
    if "straggler" not in facts:
        return []
    rank = facts["straggler"]
    rows = result.tables[TOKENS_TABLE].to_dict("records")
    received = ", ".join(f"rank {int(r[RANK])} {_amount(r)}" for r in rows)
    tokens = {int(r[RANK]): float(r[RECV_TOKENS]) for r in rows}
    mib = {int(r[RANK]): round(r[RECV_BYTES] / 2**20, 1) for r in rows}
    step_ns, saving_ns = facts["step_ns"], facts["saving_ns_per_step"]
    evidence = {
        "received_per_rank": received, "tokens_per_rank": tokens, "received_mib_per_rank": mib,
        "dispatch_imbalance": round(facts["imbalance"], 3),
        "compute_ms_per_step": round(facts["compute_ns_per_step"] / 1e6, 3),
        "balanced_compute_ms_per_step": round(facts["balanced_compute_ns_per_step"] / 1e6, 3),
        "saving_ns_per_step": round(saving_ns),
        "fraction": round(min(saving_ns / step_ns, 1.0), 4) if step_ns > 0 else 0.0,
    }
    return [Finding(
        category=CATEGORY, severity="critical" if evidence["fraction"] >= 0.2 else "warning",
        rank=rank, evidence=evidence,
        message=(f"Expert load imbalance: rank {rank} receives the most tokens in the "
                 f"all-to-all dispatch ({received}; max {facts['imbalance']:.2f}x the mean), "
                 f"and its compute follows them ({evidence['compute_ms_per_step']:.2f} ms per "
                 f"step against {evidence['balanced_compute_ms_per_step']:.2f} ms were every "
                 "rank to receive the mean), so the others wait for it"),
        recommendation=ADVICE)]


def fold_straggler(findings: list[Finding]) -> list[Finding]:
    """The straggler finding of a rank with expert load imbalance becomes its evidence."""
    experts = {f.rank: f for f in findings if f.category == CATEGORY}
    late = {f.rank: f for f in findings if f.category == "straggler" and f.rank in experts}
    out = []
    for f in findings:
        if f.category == "straggler" and f.rank in experts:
            continue
        if f.category == CATEGORY and f.rank in late:
            s = late[f.rank]
            f = replace(f, message=f"{f.message}. {s.message}",
                        evidence={**f.evidence, "straggler": s.evidence})
        out.append(f)
    return out
