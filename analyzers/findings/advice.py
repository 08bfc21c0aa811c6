"""Findings and recommendations from the step breakdown: one per rank and part above its
threshold (the Thresholds attribute its row in parts.py names), in the part's words, with
its meaning, its advice and the numbers behind it. The advice for a part depends on the
evidence: pinning memory is advised only where copies are pageable, moving fewer bytes
where pinned copies already run near the link's rate."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.findings.hostwork import host_work_evidence
from profkit.analyzers.measure.charge import AFTER_SYNC, BLOCKING_COPY
from profkit.analyzers.parts import HOST_SIDE, finding_parts
from profkit.analyzers.result import Finding
from profkit.analyzers.thresholds import Thresholds
from profkit.analyzers.units import pct

ROUND_TRIP_ADVICE = (
    "Most of this host time follows a blocking synchronisation: the host waits for GPU "
    "results (.item(), .cpu(), .tolist(), a copy to host memory), then works on them while the "
    "GPU has nothing queued. Do that work on the GPU (tensor ops instead of host NumPy/Python; "
    "a GPU optimizer instead of a CPU one), or overlap it: launch the next GPU work before "
    "reading the result (read it a step later, or every N steps). CUDA graphs cannot help "
    "while the loop waits on the host.")
PAGEABLE_ADVICE = (" Pin the host memory ({how}) "
                   "and copy with non_blocking=True: a pageable copy blocks the host and runs "
                   "below the link's rate.")


def _severity(frac: float, threshold: float) -> str:
    if frac >= max(0.4, 3 * threshold):
        return "critical"
    return "warning" if frac >= threshold else "info"


def breakdown_findings(ranks: pd.DataFrame, th: Thresholds,
                       steps: pd.DataFrame | None = None,
                       transfers: pd.DataFrame | None = None,
                       host_where: pd.DataFrame | None = None,
                       idle_code: pd.DataFrame | None = None) -> list[Finding]:
    """``host_where`` and ``idle_code``: where host work fell and the code that filled the
    GPU's idle time, for advice that fits what the host did (findings/hostwork.py)."""
    findings = []
    for row in ranks.itertuples(index=False):
        for p in finding_parts():
            part, meaning, recommendation = p.key, p.meaning, p.advice
            frac, threshold = _fraction(row, part), float(getattr(th, p.threshold))
            if frac < threshold:
                continue
            evidence = {"fraction": round(frac, 4), "threshold": threshold,
                        "step_time_ms": round(float(row.step_time_ms), 3),
                        "ms_per_step": round(frac * float(row.step_time_ms), 3)}
            extra, text = _part_evidence(part, int(row.rank), steps, transfers)
            evidence.update(extra)
            if part == "host_work":  # what the host did (a round trip's too), and its advice
                extra, advice = host_work_evidence(int(row.rank), host_where, idle_code,
                                                   _used_steps(steps, int(row.rank)))
                evidence.update(extra)
                recommendation = advice or recommendation
            if part in HOST_SIDE and evidence.get("after_sync_share", 0) > 0.5:
                meaning = "the GPU waits while the host works after blocking syncs"
                recommendation, text = ROUND_TRIP_ADVICE, ""
            findings.append(Finding(
                category=part, severity=_severity(frac, threshold), rank=int(row.rank),
                message=f"rank {row.rank}: {pct(frac)} of step time is {p.finding}"
                        f" ({meaning})",
                evidence=evidence, recommendation=recommendation + text))
        if row.compute >= 0.6:
            findings.append(Finding(
                category="compute", severity="info", rank=int(row.rank),
                message=f"rank {row.rank}: compute-bound ({pct(row.compute)} of step time in "
                        "compute kernels)",
                evidence={"fraction": round(float(row.compute), 4)},
                recommendation="Make the kernels cheaper: bf16/fp8 tensor cores, fused kernels "
                               "(torch.compile), FlashAttention; check MFU in the efficiency table."))
    return findings


def _used_steps(steps: pd.DataFrame | None, rank: int) -> int:
    if steps is None or not len(steps):
        return 1
    return int((steps["used"].astype(bool) & (steps["rank"] == rank)).sum())


def _fraction(row, part: str) -> float:
    """A part's share of the step; for communication only its transfer share (waiting for a
    late peer is the straggler's, judged there)."""
    if part == "communication" and hasattr(row, "communication_transfer"):
        return float(row.communication_transfer)
    return float(getattr(row, part))


def _part_evidence(part: str, rank: int, steps: pd.DataFrame | None,
                   transfers: pd.DataFrame | None) -> tuple[dict, str]:
    """Extra evidence for a part, and advice that only this evidence supports."""
    mine = transfers[transfers["rank"] == rank] if transfers is not None and len(transfers) else None
    if part == "memcpy" and mine is not None and len(mine):
        top = mine.sort_values("gpu_ns", ascending=False).iloc[0]
        evidence = {"top_direction": f"{top['direction']} ({top['memory']})",
                    "achieved_gbps": _round(top["achieved_gbps"]),
                    "peak_gbps": _round(top["peak_gbps"]), "link": top["link"] or "unknown"}
        pageable = (mine["memory"] == "Pageable").any()
        return evidence, _pageable_advice(steps, rank) if pageable else ""
    rows = (steps[(steps["rank"] == rank) & steps["used"].astype(bool)]
            if steps is not None and len(steps) else None)
    if part in HOST_SIDE and rows is not None:
        host = float(rows[list(HOST_SIDE)].sum().sum())
        share = float(rows[AFTER_SYNC].sum()) / max(host, 1.0)
        return {"after_sync_share": round(min(share, 1.0), 3)}, ""
    if part == "host_sync" and rows is not None:
        blocking = float(rows[BLOCKING_COPY].sum()) / max(float(rows["host_sync"].sum()), 1.0)
        pageable = mine is not None and (mine["memory"] == "Pageable").any()
        evidence = {"blocking_copy_share": round(blocking, 3)}
        return evidence, _pageable_advice(steps, rank) if pageable and blocking > 0.1 else ""
    return {}, ""


def _pageable_advice(steps: pd.DataFrame | None, rank: int) -> str:
    """Pinning advice; a DataLoader's pin_memory only where the rank waited on a DataLoader
    (issue 40: no DataLoader advice without a DataLoader in the trace)."""
    loader = (steps is not None and len(steps) and "data_loading" in steps
              and bool((steps.loc[steps["rank"] == rank, "data_loading"] > 0).any()))
    how = ("DataLoader(pin_memory=True), tensor.pin_memory()" if loader
           else "tensor.pin_memory(), or allocate with pin_memory=True")
    return PAGEABLE_ADVICE.format(how=how)


def _round(value) -> float | None:
    value = float(value)
    return round(value, 1) if np.isfinite(value) else None
