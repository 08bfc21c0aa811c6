"""Advice for a step torch.compile already compiled: no "use torch.compile" for kernels
Inductor generated.

Inductor names its generated Triton kernels ``triton_{poi,red,per,tem,for}_fused_<ops>_<n>``.
Where such kernels carry at least :data:`COMPILED_FRAC` of a rank's fusible kernel time
(elementwise, reduction and other kernels: GEMMs and attention stay library calls under
torch.compile) in the used steps, the step's fusible work is already compiled: the generic advice that suggests fusing
with torch.compile (launch overhead, compute-bound, fusion of short kernels, memory-bound
MFU) drops that suggestion and says the kernels are Inductor's; what remains of it (CUDA
graphs through ``mode='reduce-overhead'``, tensor cores, fused optimizers) stays.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pandas as pd
from profkit.analyzers.result import Finding

INDUCTOR_RE = re.compile(r"^triton_(?:poi|red|per|tem|for)_fused")
COMPILED_FRAC = 0.5
# the kernels Inductor generates in place of eager ones (GEMMs, attention, copies and
# collectives stay library calls under torch.compile)
FUSIBLE_GROUPS = ("elementwise", "reduction", "other")
# (phrase suggesting torch.compile fusion, what it becomes in a compiled step)
REWRITES = (
    (", fuse small ops with torch.compile,", ","),
    (" or fuse the small ops with torch.compile;", ";"),
    ("fused kernels (torch.compile), ", ""),
    ("fuse them (torch.compile), use fused", "use fused"),
    ("fuse memory-bound ops (torch.compile), use fused", "use fused"),
    ("Fuse them: torch.compile generates one kernel for chains of elementwise ops and "
     "reductions; use", "Use"),
)
NOTE = (" The kernels are already torch.compile's (Inductor's triton_*_fused kernels): "
        "compiling again fuses nothing more.")


def compiled_ranks(kernels: pd.DataFrame | None) -> set:
    """Ranks whose used steps' fusible kernel time is mostly Inductor-generated
    (``used_step_kernels``: rank, name, group, total_ns). None stands for the run (run-wide
    findings) when every rank is."""
    if kernels is None or kernels.empty or "total_ns" not in kernels:
        return set()
    inductor = kernels["name"].astype(str).str.match(INDUCTOR_RE.pattern)
    fusible = inductor | kernels.get("group", pd.Series("", index=kernels.index)).astype(
        str).isin(FUSIBLE_GROUPS)
    kernels = kernels[fusible.to_numpy()]
    by_rank = kernels.assign(inductor=kernels["total_ns"].where(inductor[fusible], 0)).groupby(
        "rank")[["inductor", "total_ns"]].sum()
    share = by_rank["inductor"] / by_rank["total_ns"].where(by_rank["total_ns"] > 0)
    ranks = {int(r) for r, s in share.items() if s >= COMPILED_FRAC}
    if ranks and len(ranks) == len(by_rank):
        ranks.add(None)
    return ranks


def reword(findings: list[Finding], kernels: pd.DataFrame | None) -> list[Finding]:
    """``findings`` with the torch.compile fusion advice dropped on compiled ranks."""
    ranks = compiled_ranks(kernels)
    if not ranks:
        return findings
    out = []
    for f in findings:
        text = f.recommendation
        if f.rank in ranks:
            for phrase, instead in REWRITES:
                text = text.replace(phrase, instead)
        out.append(f if text == f.recommendation else replace(f, recommendation=text + NOTE))
    return out
