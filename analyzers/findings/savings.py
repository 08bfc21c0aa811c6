"""What removing one cause would save, from the charged-time model.

Per rank, over its used steps (mean ns per step of each part, ``step_breakdown``), a cause's
saving is the step time it would give back if it were gone while the work stays:

- ``cpu_launch``, ``host_work``, ``data_loading``: their idle time. The GPU work itself stays, so the step
  cannot drop below it: that bound holds by construction (the parts sum to the step).
- ``host_sync``: the idle time the host spent blocked, plus the blocking copies' GPU time
  minus what the same bytes take as an async copy from pinned memory at ~85% of the link's
  peak (``transfers``): removing a sync keeps the work it waited for.
- ``memcpy``: the copies' exposed time, as if the data stayed on the GPU (the first advice);
  overlapping them with the rest of the step instead saves at most the shorter of the two
  (``overlap_saving_ns`` in the finding's evidence).
- ``communication``: only the exposed *transfer* part (waiting for a late peer belongs to the
  straggler), hidden under compute at most as long as there is compute to hide it under.
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

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import BLOCKING_COPY
from profkit.analyzers.measure.devices import DevicePeak

ACHIEVABLE_LINK_FRAC = 0.85  # async pinned copies reach ~85-90% of PCIe peak (55 of 63 GB/s on H200)
# Large bf16 GEMMs reach 0.7-0.85 of the dense peak (cuBLAS on Hopper; samples/runs/diagnosis
# nvml_active_h100: 8192-wide bf16 matmuls at 731-761 of 989 TFLOP/s, 0.74-0.77).
ACHIEVABLE_TENSOR_FRAC = 0.70
# PyTorch's elementwise kernels move 70-91% of HBM peak (ncu, samples/runs/why/ncu).
ACHIEVABLE_HBM_FRAC = 0.80
SAVING_PARTS = ("cpu_launch", "host_work", "data_loading", "host_sync", "memcpy",
                "communication")


def rank_means(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank: mean ns per used step of every part and view (step_ns included)."""
    if steps.empty:
        return pd.DataFrame()
    used = steps[steps["used"].astype(bool)]
    numeric = used.drop(columns=["step", "used", "excluded_reason"], errors="ignore")
    return numeric.groupby("rank").mean(numeric_only=True)


def part_savings(means: pd.DataFrame, ranks: pd.DataFrame, transfers: pd.DataFrame,
                 steps_per_rank: dict[int, int]) -> dict[tuple[int, str], float]:
    """{(rank, part): ns per step} for every part in :data:`SAVING_PARTS`."""
    out: dict[tuple[int, str], float] = {}
    split = ranks.set_index("rank") if len(ranks) else pd.DataFrame()
    for rank, row in means.iterrows():
        rank = int(rank)
        step = float(row["step_ns"])
        out[(rank, "cpu_launch")] = float(row["cpu_launch"])
        out[(rank, "host_work")] = float(row["host_work"])
        out[(rank, "data_loading")] = float(row["data_loading"])
        remaining = _async_copy_ns(transfers, rank, steps_per_rank.get(rank, 1))
        blocking = float(row.get(BLOCKING_COPY, 0.0))
        sync_idle = float(row["host_sync"]) - blocking
        out[(rank, "host_sync")] = sync_idle + max(0.0, blocking - remaining)
        out[(rank, "memcpy")] = float(row["memcpy"])
        out[(rank, "memcpy_overlap")] = min(float(row["memcpy"]), step - float(row["memcpy"]))
        share = _transfer_share(split, rank)
        out[(rank, "communication")] = min(float(row["communication"]) * share,
                                           float(row["compute"]))
    return out


def _transfer_share(split: pd.DataFrame, rank: int) -> float:
    """Share of a rank's exposed communication that is transfer, not waiting for peers."""
    if rank not in split.index or "communication_transfer" not in split.columns:
        return 1.0
    comm = float(split.loc[rank, "communication"])
    return float(split.loc[rank, "communication_transfer"]) / comm if comm > 0 else 1.0


def _async_copy_ns(transfers: pd.DataFrame, rank: int, n_steps: int) -> float:
    """ns per step the pageable copies would still take as pinned async copies."""
    if transfers is None or transfers.empty:
        return 0.0
    rows = transfers[(transfers["rank"] == rank) & (transfers["memory"] == "Pageable")]
    total = 0.0
    for row in rows.to_dict("records"):
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
