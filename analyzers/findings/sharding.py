"""FSDP wrapping: a model wrapped in more units than it has blocks, whose per-unit host work
and collectives the step waits on (:mod:`profkit.analyzers.measure.fsdp_units`).

One cause, one finding: on the rank the finding names, the launch-overhead and host-work
findings and a straggler finding whose lateness is its own host (the per-unit work the
finding removes) fold into it as evidence (:func:`fold_units`), when FSDP's ranges hold at
least half of the time the GPU waits on that host.
"""

from __future__ import annotations

import math
from dataclasses import replace

from profkit.analyzers import units as U
from profkit.analyzers.measure.fsdp_units import RANKS_TABLE, ROOT, UNITS_TABLE
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import Thresholds

CATEGORY = "fsdp_wrapping"
MIN_SAVING_FRAC = 0.1  # a smaller saving is no reason to rewrap a model
MIN_FSDP_HOST_SHARE = 0.5  # FSDP's share of the host wait for the host findings to fold in
FOLDED = ("cpu_launch", "host_work")


def fsdp_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """One finding on the rank whose step rewrapping shortens most, where it would save at
    least MIN_SAVING_FRAC of the step."""
    ranks = result.tables[RANKS_TABLE]
    ranks = ranks[(ranks["saving_ms_per_step"] > 0) & (ranks["step_ms"] > 0)]
    if ranks.empty:
        return []
    row = ranks.loc[(ranks["saving_ms_per_step"] / ranks["step_ms"]).idxmax()].to_dict()
    frac = row["saving_ms_per_step"] / row["step_ms"]
    if not frac >= MIN_SAVING_FRAC:
        return []
    rank, units, target = int(row["rank"]), int(row["units"]), int(row["target_units"])
    table = result.tables[UNITS_TABLE]
    mine = table[(table["rank"] == rank) & (table["unit"] != ROOT)] if len(table) else \
        table.reindex(columns=["rank", "unit", "all_gather_mib"])  # FSDP1: no unit names
    sizes = mine["all_gather_mib"]
    per_block = None if len(mine) else int(row["units_per_block"])  # FSDP1: from its sizes
    examples = ", ".join(mine["unit"].head(3)) if len(mine) else (
        f"FSDP1 names no module; the forward's all-gather sizes repeat every "
        f"{per_block} units, {int(row['blocks'])} times")
    shown = f"{examples}, ...; all-gathers of {_sizes(sizes)} each" if len(mine) else examples
    host_share = row["fsdp_host_ms_per_step"] / row["host_idle_ms_per_step"] \
        if row["host_idle_ms_per_step"] > 0 else 0.0
    evidence = {
        "units": units, "target_units": target, "units_example": examples,
        "units_per_block": per_block,
        "all_gather_mib_min": round(float(sizes.min()), 2) if len(sizes) else None,
        "all_gather_mib_max": round(float(sizes.max()), 2) if len(sizes) else None,
        "fsdp_host_ms_per_step": round(row["fsdp_host_ms_per_step"], 3),
        "host_ms_per_unit": round(row["fsdp_host_ms_per_step"] / units, 3),
        "exposed_comm_ms_per_step": round(row["exposed_comm_ms_per_step"], 3),
        "host_idle_ms_per_step": round(row["host_idle_ms_per_step"], 3),
        "fsdp_host_share": round(min(host_share, 1.0), 3),
    }
    finding = Finding(
        category=CATEGORY, severity="critical" if frac >= 0.2 else "warning", rank=rank,
        evidence=evidence,
        message=(f"FSDP wraps the model in {units} units where one per block would make {target} "
                 f"({shown}): each unit costs "
                 f"{evidence['host_ms_per_unit']:.2f} ms of host work per step "
                 f"({row['fsdp_host_ms_per_step']:.1f} ms in all) and its own all-gather and "
                 f"reduce-scatter ({row['exposed_comm_ms_per_step']:.1f} ms per step exposed), "
                 f"and rank {rank}'s GPU waits {row['host_idle_ms_per_step']:.1f} ms per step "
                 "on its host"),
        recommendation=(
            f"Wrap one unit per transformer block ({units} -> {target} units): fully_shard each "
            "block, then the root, not each Linear (FSDP1: a ModuleWrapPolicy of the block "
            "class). Keep prefetching on (FSDP2 prefetches one unit ahead; "
            "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch for more), use "
            "reshard_after_forward=False on the last blocks where memory allows (no backward "
            "all-gather), and with FSDP1 or ZeRO-3 raise the bucket and prefetch sizes "
            "(stage3_prefetch_bucket_size, reduce_bucket_size)."))
    return [finding.with_saving(row["saving_ms_per_step"], frac)]


def _sizes(sizes) -> str:
    if not len(sizes):
        return "unknown size"
    lo, hi = float(sizes.min()), float(sizes.max())
    return U.size(lo * 2**20) if math.isclose(lo, hi, rel_tol=0.05) else \
        f"{U.size(lo * 2**20)} to {U.size(hi * 2**20)}"


def fold_units(findings: list[Finding]) -> list[Finding]:
    """The host findings of the wrapping finding's rank become its evidence (module doc)."""
    units = {f.rank: f for f in findings if f.category == CATEGORY
             and f.evidence.get("fsdp_host_share", 0) >= MIN_FSDP_HOST_SHARE}

    def folds(f: Finding) -> bool:
        if f.rank not in units:
            return False
        return f.category in FOLDED or (f.category == "straggler"
                                        and bool(f.evidence.get("host_excess_ms_per_step")))

    folded: dict[int, dict] = {}
    for f in findings:
        if folds(f):
            saving = (f.estimated_saving or {}).get("ms_per_step")
            folded.setdefault(f.rank, {})[f.category] = {"message": f.message, "saving_ms": saving}
    out = []
    for f in findings:
        if folds(f):
            continue
        if f.category == CATEGORY and f.rank in folded:
            f = replace(f, evidence={**f.evidence, "folded": folded[f.rank]})
        out.append(f)
    return out
