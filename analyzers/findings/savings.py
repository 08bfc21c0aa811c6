"""What removing one cause would save, from the charged-time model.

Per rank, over its used steps (mean ns per step of each part, ``step_breakdown``), a cause's
saving is the step time it would give back if it were gone while the work stays. A part's
row in parts.py names its rule (:data:`SAVING_RULES`):

- ``idle_time`` (cpu_launch, host_work, data_loading): the part's idle time. The GPU work
  itself stays, so the step cannot drop below it: that bound holds by construction (the
  parts sum to the step).
- ``blocking_sync`` (host_sync): the idle time the host spent blocked, plus the blocking
  copies' GPU time minus what the same bytes take as an async copy from pinned memory at
  ~85% of the link's peak (``transfers``): removing a sync keeps the work it waited for.
- ``copies`` (memcpy): the copies' exposed time, as if the data stayed on the GPU (the first
  advice); overlapping them with the rest of the step instead saves at most the shorter of
  the two (``<part>_overlap``, ``overlap_saving_ms`` in the finding's evidence).
- ``collective_transfer`` (communication): only the exposed *transfer* part (waiting for a
  late peer belongs to the straggler), hidden under compute at most as long as there is
  compute to hide it under.
- a straggler: the time the other ranks wait, exposed, for it each step (its own extra work
  stays), as a share of their step.
- ``precision`` (fp32 GEMMs off the tensor cores): their time minus what their FLOPs take in
  bf16 at an achievable share of the device's bf16 tensor peak (not the ratio of peaks:
  fp32 GEMMs run near their peak, bf16 ones do not reach theirs), or their bytes, halved, at
  an achievable share of HBM bandwidth when that is slower (:func:`bf16_gemm_ns`).
- ``memory_bound``: the runs of fusable memory-bound kernels' time minus the bytes one fused
  kernel must still move at the bandwidth the run reached (analyzers/measure/memruns.py).
Both are capped by the finding's share of the step and the rank's compute time
(consolidate.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import BLOCKING_COPY
from profkit.analyzers.measure.devices import DevicePeak
from profkit.analyzers.parts import BY_KEY, SAVING_PARTS

ACHIEVABLE_LINK_FRAC = 0.85  # async pinned copies reach ~85-90% of PCIe peak (55 of 63 GB/s on H200)
# Large bf16 GEMMs reach 0.7-0.85 of the dense peak (cuBLAS on Hopper; samples/runs/diagnosis
# nvml_active_h100: 8192-wide bf16 matmuls at 731-761 of 989 TFLOP/s, 0.74-0.77).
ACHIEVABLE_TENSOR_FRAC = 0.70
# PyTorch's elementwise kernels move 70-91% of HBM peak (ncu, samples/runs/why/ncu).
ACHIEVABLE_HBM_FRAC = 0.80
OVERLAP_SAVING = "_overlap"  # a part's key + this: the saving of overlapping it instead


def rank_means(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank: mean ns per used step of every part and view (step_ns included)."""
    if steps.empty:
        return pd.DataFrame()
    used = steps[steps["used"].astype(bool)]
    numeric = used.drop(columns=["step", "used", "excluded_reason"], errors="ignore")
    return numeric.groupby("rank").mean(numeric_only=True)


@dataclass(frozen=True)
class RankFacts:
    """What a saving rule may read besides the rank's mean step: its rank, the run's rank
    breakdown indexed by rank (communication's transfer share), the transfers and the
    rank's used steps."""

    rank: int
    split: pd.DataFrame
    transfers: pd.DataFrame
    n_steps: int
    pageable: dict | None = None  # {rank: its pageable transfer rows}: _pageable_rows


def _idle_time(part: str, row: pd.Series, facts: RankFacts) -> dict[str, float]:
    return {part: float(row[part])}


def _blocking_sync(part: str, row: pd.Series, facts: RankFacts) -> dict[str, float]:
    remaining = _async_copy_ns(facts.transfers, facts.rank, facts.n_steps, facts.pageable)
    blocking = float(row.get(BLOCKING_COPY, 0.0))
    sync_idle = float(row[part]) - blocking
    return {part: sync_idle + max(0.0, blocking - remaining)}


def _copies(part: str, row: pd.Series, facts: RankFacts) -> dict[str, float]:
    step = float(row["step_ns"])
    return {part: float(row[part]),
            part + OVERLAP_SAVING: min(float(row[part]), step - float(row[part]))}


def _collective_transfer(part: str, row: pd.Series, facts: RankFacts) -> dict[str, float]:
    share = _transfer_share(facts.split, facts.rank)
    return {part: min(float(row[part]) * share, float(row["compute"]))}


# rule name (a part's ``saving`` in parts.py) -> {key: ns per step} of one rank's part
SAVING_RULES: dict[str, Callable[[str, pd.Series, RankFacts], dict[str, float]]] = {
    "idle_time": _idle_time, "blocking_sync": _blocking_sync, "copies": _copies,
    "collective_transfer": _collective_transfer}


def part_savings(means: pd.DataFrame, ranks: pd.DataFrame, transfers: pd.DataFrame,
                 steps_per_rank: dict[int, int]) -> dict[tuple[int, str], float]:
    """{(rank, part): ns per step} for every part in :data:`SAVING_PARTS`, by its rule
    (module doc); (rank, part + :data:`OVERLAP_SAVING`) where the rule has that alternative."""
    out: dict[tuple[int, str], float] = {}
    split = ranks.set_index("rank") if len(ranks) else pd.DataFrame()
    pageable = _pageable_rows(transfers)
    for rank, row in means.iterrows():
        facts = RankFacts(int(rank), split, transfers, steps_per_rank.get(int(rank), 1),
                          pageable)
        for part in SAVING_PARTS:
            rule = SAVING_RULES[BY_KEY[part].saving]
            out.update({(facts.rank, k): ns for k, ns in rule(part, row, facts).items()})
    return out


def _transfer_share(split: pd.DataFrame, rank: int) -> float:
    """Share of a rank's exposed communication that is transfer, not waiting for peers."""
    if rank not in split.index or "communication_transfer" not in split.columns:
        return 1.0
    comm = float(split.loc[rank, "communication"])
    return float(split.loc[rank, "communication_transfer"]) / comm if comm > 0 else 1.0


def _pageable_rows(transfers: pd.DataFrame | None) -> dict:
    """{rank: its pageable copies' rows, in table order} (one pass for every rank)."""
    if transfers is None or transfers.empty:
        return {}
    out: dict = {}
    for row in transfers[transfers["memory"] == "Pageable"].to_dict("records"):
        out.setdefault(row["rank"], []).append(row)
    return out


def _async_copy_ns(transfers: pd.DataFrame, rank: int, n_steps: int,
                   pageable: dict | None = None) -> float:
    """ns per step the pageable copies would still take as pinned async copies
    (``pageable``: :func:`_pageable_rows` of ``transfers``, found once)."""
    if transfers is None or transfers.empty:
        return 0.0
    if pageable is None:
        pageable = _pageable_rows(transfers)
    total = 0.0
    for row in pageable.get(rank, ()):
        peak = row.get("peak_gbps")
        if row.get("bytes") and peak and np.isfinite(peak):
            total += float(row["bytes"]) / (ACHIEVABLE_LINK_FRAC * float(peak))  # GB/s = B/ns
    return total / max(n_steps, 1)


def bf16_gemm_ns(flops: float, nbytes: float, peak: DevicePeak) -> float:
    """ns that GEMMs of ``flops`` moving ``nbytes`` in fp32 would take in bf16 on ``peak``
    (module doc: the slower of math at an achievable share of the bf16 peak and half the
    bytes at an achievable share of HBM bandwidth)."""
    math_ns = flops / (ACHIEVABLE_TENSOR_FRAC * peak.bf16_tflops * 1e3)  # 1 TFLOP/s: 1e3 FLOP/ns
    memory_ns = 0.5 * nbytes / (ACHIEVABLE_HBM_FRAC * peak.mem_bw_tbps * 1e3)  # 1 GB/s: 1 B/ns
    return max(math_ns, memory_ns)


def as_fraction(saving_ns: float, step_ns: float) -> float:
    return float(saving_ns / step_ns) if step_ns > 0 else float("nan")
