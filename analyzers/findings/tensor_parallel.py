"""Tensor-parallel collectives that hold the step up for their own transfer
(:mod:`profkit.analyzers.measure.tensor_parallel`), and the communication finding of a rank
whose exposed communication is mostly tensor-parallel: its advice is TP's, not DDP's
(bucket sizes, no_sync) nor FSDP's (:func:`tp_communication`).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.measure.tensor_parallel import TP_TABLE
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

CATEGORY = "tensor_parallel"
MIN_TRANSFER_SHARE = 0.10  # exposed TP transfer below this share of the step is no finding
MIN_TP_SHARE = 0.5  # TP's share of a rank's exposed communication for TP advice
ADVICE = (
    "Hide or shrink the tensor-parallel collectives: a larger microbatch per rank (fewer, "
    "larger all-reduces per sample: their fixed latency is paid per layer), sequence "
    "parallelism (SequenceParallel on the norms: a reduce-scatter and an all-gather in place "
    "of each all-reduce, with the activations between them sharded), and async TP, which "
    "overlaps them with the matmuls (torch.compile with "
    "torch._inductor.config._micro_pipeline_tp = True and symmetric memory for the TP group; "
    "Megatron's --tp-comm-overlap). Keep TP within one node's NVLink.")


ASYNC_ADVICE = (
    "Overlap the all-gathers and reduce-scatters with the matmuls: async TP (torch.compile "
    "with torch._inductor.config._micro_pipeline_tp = True and symmetric memory for the TP "
    "group; Megatron's --tp-comm-overlap), or a larger microbatch per rank (fewer, larger "
    "collectives: their fixed latency is paid per layer). Keep TP within one node's NVLink.")
ASYNC_ON = (
    "Async TP is on (symmetric-memory transfers inside the compiled graphs): what stays "
    "exposed is the all-gathers and reduce-scatters it did not fuse and the last shard of each "
    "it did. A larger microbatch per rank, or a smaller TP degree with more data "
    "parallelism, is what is left to try.")


def tp_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """One finding per rank whose exposed TP transfer is at least MIN_TRANSFER_SHARE of its
    step, with async TP's saving (:func:`async_saving_ms`) where it is not on already."""
    table = result.tables[TP_TABLE]
    out = []
    for row in table[table["transfer_share"] >= MIN_TRANSFER_SHARE].to_dict("records"):
        rank = int(row["rank"])
        evidence = {k: round(float(row[k]), 4) for k in (
            "collectives_per_step", "median_mib", "exposed_ms_per_step", "waiting_ms_per_step",
            "transfer_ms_per_step", "transfer_share")}
        sp, on = bool(row.get("sequence_parallel")), bool(row.get("async_tp"))
        evidence.update(sequence_parallel=sp, async_tp=on)
        advice = ASYNC_ON if on else ASYNC_ADVICE if sp else ADVICE
        f = Finding(
            category=CATEGORY, severity="critical" if row["transfer_share"] >= 0.25 else "warning",
            rank=rank, evidence=evidence, recommendation=advice,
            message=(f"rank {rank}: tensor-parallel collectives inside the layers "
                     f"({row['collectives_per_step']:.0f} per step, {_sizes(row)}) hold the GPU "
                     f"up {row['transfer_ms_per_step']:.2f} ms per step "
                     f"({row['transfer_share']:.0%} of the step) for their own transfer, "
                     f"besides {row['waiting_ms_per_step']:.2f} ms waiting for peers"
                     + ("" if on else "; " + _overlap_text(row, sp))))
        saving = None if on else async_saving_ms(row)
        out.append(f.with_saving(saving, saving / row["step_ms"]) if saving else f)
    return out


def async_saving_ms(row: dict) -> float | None:
    """What async TP would hide per step: (n-1)/n of the exposed transfer of the collectives
    it splits (sequence parallel's all-gathers and reduce-scatters; an all-reduce's, once
    sequence parallelism turns it into the two), n the TP degree. Each rank's own shard is
    local; the n-1 others arrive while the matmul runs on those already there, so at most
    (n-1)/n of the transfer can hide. On 2 x H200 (samples/runs/parallel/tp_sp -> tp_async,
    a sequence-parallel MLP compiled with and without the micro-pipeline): 3.4 ms (11%)
    estimated, 1.5 ms (5.3%) measured after the profiler stopped."""
    n = int(row.get("group_size") or 0)
    basis = row["split_transfer_ms_per_step"] if row.get("sequence_parallel") \
        else row["transfer_ms_per_step"]
    if n < 2 or not basis > 0 or not row.get("step_ms", 0) > 0:
        return None
    return basis * (n - 1) / n


def _overlap_text(row: dict, sp: bool) -> str:
    what = "they are sequence parallel's all-gathers and reduce-scatters" if sp else \
        "they are all-reduces (sequence parallelism turns each into a reduce-scatter and an " \
        "all-gather)"
    n = int(row.get("group_size") or 0)
    return f"{what}; async TP overlaps up to (n-1)/n of that transfer with the matmuls" + (
        f" (n = {n})" if n >= 2 else " (the TP degree n is not in the trace)")


def _sizes(row: dict) -> str:
    lo, hi = row["median_mib"] * 2**20, row.get("max_mib", row["median_mib"]) * 2**20
    return f"{U.size(lo)} each" if hi <= 2 * lo else f"median {U.size(lo)}, up to {U.size(hi)}"


def _advice(split: dict) -> str:
    """TP's advice; where the TP collectives mostly wait for a late peer, that peer first."""
    waiting, exposed = split["tp_waiting_ms_per_step"], split["tp_exposed_ms_per_step"]
    if waiting < 0.5 * exposed:
        return ADVICE
    return (f"These are tensor-parallel collectives, and {waiting / exposed:.0%} of their exposed "
            "time is waiting for a late peer, which no TP setting shortens: make "
            "that rank keep up first (the straggler and host findings). Then: " + ADVICE)


def tp_communication(findings: list[Finding], table: pd.DataFrame | None) -> list[Finding]:
    """A rank's communication finding where TP collectives are at least MIN_TP_SHARE of its
    exposed communication: folded into that rank's TP finding, else given TP's advice."""
    if table is None or table.empty:
        return findings
    tp_ms = dict(zip(table["rank"], table["exposed_ms_per_step"]))
    tp_split = {int(r["rank"]): {f"tp_{k}": round(float(r[k]), 3) for k in (
        "exposed_ms_per_step", "waiting_ms_per_step", "transfer_ms_per_step")}
        for r in table.to_dict("records")}
    tp_found = {f.rank for f in findings if f.category == CATEGORY}

    def is_tp(f: Finding) -> bool:
        comm_ms = f.evidence.get("ms_per_step") or 0.0
        return f.category == "communication" and f.rank in tp_ms and comm_ms > 0 \
            and tp_ms[f.rank] >= MIN_TP_SHARE * comm_ms

    folded, out = {}, []
    for f in findings:
        if is_tp(f) and f.rank in tp_found:  # one cause, one finding
            folded[f.rank] = f.message
            continue
        if is_tp(f):
            f = replace(f, recommendation=_advice(tp_split[f.rank]),
                        evidence={**f.evidence, **tp_split[f.rank]})
        out.append(f)
    return [replace(f, evidence={**f.evidence, "communication": folded[f.rank]})
            if f.category == CATEGORY and f.rank in folded else f for f in out]
