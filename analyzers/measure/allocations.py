"""GPU memory that PyTorch's caching allocator held, step by step (the trace's ``[memory]``
events: the rank table ``memory``).

Per rank, device and recorded step, from the GPU (``Device Type`` CUDA) events whose CPU
time lies in the step's ProfilerStep range: the peaks of the allocator's totals after each
event (``Total Allocated``: bytes in live tensors; ``Total Reserved``: bytes it holds from
the driver, allocated or cached), the allocated bytes when the step began (what stays
resident across steps: weights, optimizer state, the allocator's totals just before the
step's first event) and the transient part, peak - start (activations, gradients and
workspaces of the step). Capacity is the device's memory as the NVML peak reads it
(``devices.device_info``: the trace's ``totalGlobalMem``, else run.json's ``gpus``).

Named ``allocations``, not ``memory``: the findings' category ``memory`` is NVML's peak
(``efficiency``), a reading of the whole device, other processes and the CUDA context
included; these are the allocator's own counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.devices import device_info
from profkit.analyzers.measure.npgroups import codes, group_table
from profkit.analyzers.result import Result

from profkit import schema as S
from profkit.model import RankData

STEP_COLUMNS = ("rank", "device", "step", "start_allocated_bytes", "peak_allocated_bytes",
                "peak_reserved_bytes", "transient_bytes", "capacity_bytes", "used")
RANK_COLUMNS = ("rank", "device", "steps", "peak_allocated_bytes", "peak_reserved_bytes",
                "capacity_bytes", "peak_frac", "reserved_over_allocated", "resident_bytes",
                "transient_bytes", "batch_headroom_x")


def rank_allocations(data: RankData, used: dict[int, int] | None,
                     run_meta: dict | None = None) -> pd.DataFrame:
    """One row per device and recorded step of one rank with GPU memory events
    (:data:`STEP_COLUMNS`); ``used``: the steps the verdict reads (keys), None for none;
    ``run_meta``: run.json's facts, whose ``gpus`` give a device's memory where the trace
    header does not (as for NVML's peak, :func:`~.devices.device_info`)."""
    mem = data.table("memory")
    if mem.empty:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    gpu = (mem[S.DEVICE_TYPE] == S.DEVICE_TYPE_CUDA).to_numpy()
    mem = mem[gpu & (mem[S.STEP] >= 0).to_numpy() & ~mem[S.OUT_OF_MEMORY].to_numpy(bool)]
    if mem.empty:
        return pd.DataFrame(columns=list(STEP_COLUMNS))
    # The table is in time order, so a group's first row is the step's first event; its
    # total minus its own bytes is what was allocated just before the step began.
    before = mem[S.ALLOCATED_BYTES] - mem[S.BYTES]
    spec = dict(start_allocated_bytes=("before", "first"),
                peak_allocated_bytes=(S.ALLOCATED_BYTES, "max"),
                peak_reserved_bytes=(S.RESERVED_BYTES, "max"))
    table = group_table(mem.assign(before=before), [S.DEVICE, S.STEP], spec)  # numpy: ~3 ms less
    if table is None:
        table = mem.assign(before=before).groupby([S.DEVICE, S.STEP], sort=True).agg(
            **spec).reset_index()
    table["start_allocated_bytes"] = table["start_allocated_bytes"].clip(lower=0)
    table["transient_bytes"] = (table["peak_allocated_bytes"]
                                - table["start_allocated_bytes"]).clip(lower=0)
    table["capacity_bytes"] = [capacity_bytes(data.meta, run_meta or {}, int(d))
                               for d in table[S.DEVICE]]
    table["used"] = table[S.STEP].isin(list(used or {})).to_numpy()
    table.insert(0, "rank", data.rank)
    return table[list(STEP_COLUMNS)]


def capacity_bytes(rank_meta: dict, run_meta: dict, device: int) -> float:
    mem_bytes = device_info(rank_meta, run_meta, device)["mem_bytes"]
    return float(mem_bytes) if mem_bytes else np.nan


def combine_allocations(frames: list[pd.DataFrame]) -> Result:
    """The ``memory`` table (every rank's steps) and ``memory_ranks`` (per rank and device,
    over the steps the verdict uses, or every recorded step of a rank where it uses none).
    Names the topic ``allocations`` only when some rank has GPU memory events."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return Result(tables={"memory": pd.DataFrame(columns=list(STEP_COLUMNS)),
                              "memory_ranks": pd.DataFrame(columns=list(RANK_COLUMNS))})
    steps = pd.concat(frames, ignore_index=True)
    steps["used"] = steps["used"].astype(bool)
    return Result(tables={"memory": steps, "memory_ranks": _per_rank(steps)},
                  facts={"topic": "allocations"})


def _per_rank(steps: pd.DataFrame) -> pd.DataFrame:
    """Peaks over each rank's used steps (all its steps where none is used)."""
    code, ranks = codes(steps["rank"].to_numpy())
    used = steps["used"].to_numpy(bool)
    any_used = np.bincount(code, weights=used, minlength=len(ranks))[code] > 0
    chosen = steps[used | ~any_used]
    spec = dict(steps=("step", "size"), peak_allocated_bytes=("peak_allocated_bytes", "max"),
                peak_reserved_bytes=("peak_reserved_bytes", "max"),
                capacity_bytes=("capacity_bytes", "max"),
                resident_bytes=("start_allocated_bytes", "max"),
                transient_bytes=("transient_bytes", "max"))
    table = group_table(chosen, ["rank", "device"], spec)  # numpy: ~1 ms less than pandas
    if table is None:
        table = chosen.groupby(["rank", "device"], sort=True).agg(**spec).reset_index()
    reserved = table["peak_reserved_bytes"].to_numpy(np.float64)
    allocated = table["peak_allocated_bytes"].to_numpy(np.float64)
    capacity = table["capacity_bytes"].to_numpy(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        table["peak_frac"] = np.where(capacity > 0, reserved / capacity, np.nan)
        table["reserved_over_allocated"] = np.where(allocated > 0, reserved / allocated, np.nan)
    table["batch_headroom_x"] = batch_headroom_x(capacity, table["resident_bytes"].to_numpy(
        np.float64), table["transient_bytes"].to_numpy(np.float64))
    return table[list(RANK_COLUMNS)]


def batch_headroom_x(capacity: np.ndarray, resident: np.ndarray,
                     transient: np.ndarray) -> np.ndarray:
    """How many times the step's transient memory fits beside the resident part in the
    device: the factor by which the batch could grow before out-of-memory, if what comes
    and goes within a step (activations, their gradients, workspaces) grows with the batch
    and what stays (weights, optimizer state) does not. NaN without a capacity or a
    transient part. The allocator's fragmentation and the CUDA context are not counted."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((capacity > 0) & (transient > 0), (capacity - resident) / transient,
                        np.nan)
