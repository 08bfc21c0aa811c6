"""Findings and recommendations from the step breakdown: one per rank and part above its
threshold (thresholds.py), with the numbers behind it."""

from __future__ import annotations

import pandas as pd
from profkit.analyzers.findings import Finding
from profkit.analyzers.thresholds import Thresholds

# part -> (threshold attribute, what it means, what to change)
ADVICE = {
    "data_loading": (
        "data_loading_frac",
        "the GPU waits for the DataLoader",
        "Feed the GPU faster: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True,"
        " prefetch_factor>=2); move per-sample CPU work out of __getitem__ or onto the GPU.",
    ),
    "communication": (
        "communication_frac",
        "collectives are not hidden under compute",
        "Overlap communication with compute: tune DDP bucket_cap_mb, FSDP forward/backward "
        "prefetch, gradient accumulation (no_sync) or a larger batch per GPU; check the link "
        "bandwidth in the collectives table.",
    ),
    "host_sync": (
        "host_sync_frac",
        "blocking host synchronisations drain the GPU queue",
        "Remove per-step synchronisations: no .item()/.cpu()/print of tensors in the loop, log "
        "metrics every N steps, copy to pinned memory with non_blocking=True.",
    ),
    "cpu_launch": (
        "cpu_launch_frac",
        "the GPU waits for the host to launch work",
        "Cut launch overhead: CUDA graphs (torch.compile(mode='reduce-overhead') or "
        "torch.cuda.graphs), fuse small ops with torch.compile, or a larger batch per launch.",
    ),
    "memcpy": (
        "communication_frac",
        "exposed memory copies",
        "Overlap copies with compute: pinned host memory with non_blocking=True, prefetch the "
        "next batch to the GPU on a side stream.",
    ),
}


def _severity(frac: float, threshold: float) -> str:
    if frac >= max(0.4, 3 * threshold):
        return "critical"
    return "warning" if frac >= threshold else "info"


def breakdown_findings(ranks: pd.DataFrame, th: Thresholds) -> list[Finding]:
    findings = []
    for row in ranks.itertuples(index=False):
        for part, (attr, meaning, recommendation) in ADVICE.items():
            frac, threshold = float(getattr(row, part)), float(getattr(th, attr))
            if frac < threshold:
                continue
            findings.append(Finding(
                category=part, severity=_severity(frac, threshold), rank=int(row.rank),
                message=f"rank {row.rank}: {frac:.0%} of step time is {part.replace('_', ' ')}"
                        f" ({meaning})",
                evidence={"fraction": round(frac, 4), "threshold": threshold,
                          "step_time_ms": round(float(row.step_time_ms), 3),
                          "ms_per_step": round(frac * float(row.step_time_ms), 3)},
                recommendation=recommendation))
        if row.compute >= 0.6:
            findings.append(Finding(
                category="compute", severity="info", rank=int(row.rank),
                message=f"rank {row.rank}: compute-bound ({row.compute:.0%} of step time in "
                        "compute kernels)",
                evidence={"fraction": round(float(row.compute), 4)},
                recommendation="Make the kernels cheaper: bf16/fp8 tensor cores, fused kernels "
                               "(torch.compile), FlashAttention; check MFU in the efficiency table."))
    return findings
