"""Sharded data parallelism (FSDP2, FSDP1): the units a model is wrapped in, what each costs
per step, and what wrapping one unit per transformer block would save.

FSDP2 (``fully_shard``) names every unit in its ``record_function`` ranges:
``FSDP::pre_forward (blocks.3.attn.qkv)``, ``FSDP::all_gather (...)``,
``FSDP::post_backward_reduce (...)``; the root module's ranges carry no name. A unit is a
distinct name of ``FSDP::pre_forward`` (the root counted once). FSDP1 names no module: its
units are counted as its ``FullyShardedDataParallel._pre_forward`` calls per step, and its
blocks are read from the sizes of the forward's all-gathers, one flat parameter per unit:
where they repeat with a period of p units L times (:func:`repeating_units`; every Linear
of a GPT block its own unit: p = 4), the wrapping target is one unit per period. Checked
on the FSDP2 captures, whose names say the answer: the sizes alone give 4 units per block
x 8 blocks (fsdp_linear) and 1 x 8 (fsdp_block). DeepSpeed ZeRO-3 records no range per
unit: :mod:`.zero3` reads it.

Per unit: the all-gather bytes (the ``all_gather`` collectives issued inside its
``FSDP::all_gather`` range) and the host time in its FSDP ranges per step. Per step: the
host time in all FSDP ranges, and the exposed all-gather and reduce-scatter time (their
kernels while no compute kernel runs).

The wrapping target is one unit per block: a unit named below a numbered child of a module
list (``blocks.3.attn.qkv``) belongs to that block (``blocks.3``); the others stay units.

The model of the saving: the per-unit work of FSDP (its hooks, copy-in / copy-out, one
collective launch per unit and direction, each with its fixed latency) is what a host-bound
or collective-bound FSDP step spends its time on, so that time (the GPU waiting on its host,
plus its exposed collectives, less the part of them spent waiting for a late peer) shrinks
with the unit count: saving = (host wait + exposed collectives - peer wait) x (1 - target
units / units). On 2 x H200 (samples/runs/parallel/fsdp_linear, 33 units, every Linear its
own) this gives 90.4 ms of rank 0's 134.5 ms step (67%; its GPU waits 120.9 ms per step on
its host); rank 1's 116.3 ms of exposed collectives are 112.8 ms of waiting for rank 0. The
per-block twin (9 units) measured 58% shorter under the profiler and 72% without it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from profkit.analyzers.measure.charge import spans
from profkit.analyzers.measure.tensor_parallel import exposed_collectives, waited_ns
from profkit.analyzers.parts import HOST_IDLE
from profkit.analyzers.result import Result

from profkit import intervals
from profkit import schema as S
from profkit.columns import category_mask, name_values
from profkit.model import RankData

TOPIC = "fsdp"
RANGE = re.compile(r"^FSDP::(\w+)(?: \((.*)\))?$")
FSDP_RANGE_RE = re.compile(r"^FSDP::")
FSDP1_PRE_FORWARD = "FullyShardedDataParallel._pre_forward"
FSDP1_RANGE_RE = re.compile(r"^FullyShardedDataParallel\.")
ROOT = "(root)"
BLOCK = re.compile(r"^(.*?\.\d+)(?:\.|$)")  # up to the first numbered child: blocks.3
UNITS_TABLE = "fsdp_units"
RANKS_TABLE = "fsdp_ranks"
EXPOSED_KINDS = ("all_gather", "reduce_scatter")
MAX_PATTERN_UNITS = 1000  # units looked at for a repeating pattern (FSDP1)


def block_of(unit: str) -> str:
    """The transformer block a unit belongs to (``blocks.3.mlp.fc`` -> ``blocks.3``); a unit
    outside a numbered module list is its own."""
    m = BLOCK.match(unit)
    return m.group(1) if m else unit


def repeating_units(sizes: list[float]) -> tuple[int, int]:
    """(units per block, blocks) of a forward's all-gather sizes in issue order, found where
    no unit names a module (FSDP1): the period ``p`` whose run of repeats (``sizes[i] ==
    sizes[i + p]``) covers the most units, the shortest among equals, and its repeats.
    Every Linear its own unit in a GPT block gives (4, blocks): q/k/v, the projection and
    the MLP's two; one unit per block gives (1, blocks). (0, 0) where no run covers at least
    half of the units twice over: no block structure to go by."""
    n = len(sizes)
    best = (0, 0, 0)  # (covered, -period, repeats)
    for p in range(1, n // 2 + 1):
        run = 0
        for i in range(n - p):
            run = run + 1 if sizes[i] == sizes[i + p] else 0
            repeats = (run + p) // p
            if repeats >= 2 and (repeats * p, -p) > best[:2]:
                best = (repeats * p, -p, repeats)
    covered, period, repeats = best
    return (-period, repeats) if covered >= max(n / 2, 2) else (0, 0)


def _in_steps(ev: pd.DataFrame, used: dict[int, int] | None) -> pd.DataFrame:
    return ev if used is None else ev[ev[S.STEP].isin(list(used))]


def rank_fsdp_units(data: RankData, used: dict[int, int] | None,
                    parts: dict | None) -> dict | None:
    """This rank's FSDP units and their costs per used step (None: no FSDP ranges)."""
    ev = data.events
    n_steps = max(len(used), 1) if used else 1
    ann = _in_steps(ev[ev[S.KIND] == S.KIND_ANNOTATION], used)
    fsdp = ann[category_mask(ann[S.NAME], FSDP_RANGE_RE)]
    if fsdp.empty:
        fsdp1 = ann[ann[S.NAME] == FSDP1_PRE_FORWARD]
        if fsdp1.empty:
            return None
        units = int(round(len(fsdp1) / n_steps))
        per_block, blocks = repeating_units(_forward_gathers(data, used, fsdp1))
        target = units - blocks * per_block + blocks if per_block else np.nan
        ranges = ann[category_mask(ann[S.NAME], FSDP1_RANGE_RE)]  # all its hooks' ranges
        return {"version": "FSDP1", "units": units, "target_units": target, "table": None,
                "units_per_block": per_block, "blocks": blocks,
                **step_costs(data, used, parts, ranges, n_steps)}
    parsed = pd.Series(name_values(fsdp[S.NAME], str)).str.extract(RANGE)
    fsdp = fsdp.assign(what=parsed[0].to_numpy(), unit=parsed[1].fillna(ROOT).to_numpy())
    pre = fsdp[fsdp["what"] == "pre_forward"]
    if pre.empty:
        return None
    rows = []
    coll = _in_steps(data.collectives, used)
    gathers = coll[coll[S.COLL_NAME] == "all_gather"]
    for unit, mine in fsdp.groupby("unit", sort=False):
        iv = spans(mine)
        ag = mine[mine["what"] == "all_gather"]
        inside = np.zeros(len(gathers), bool)
        cpu = gathers[S.CPU_TS_NS].to_numpy(np.int64)
        for s, e in zip(ag[S.TS_NS].to_numpy(np.int64), (ag[S.TS_NS] + ag[S.DUR_NS]).to_numpy(np.int64)):
            inside |= (cpu >= s) & (cpu <= e)
        rows.append({"unit": unit, "host_ms_per_step": intervals.total(iv) / n_steps / 1e6,
                     "all_gather_mib": float(gathers[S.MSG_BYTES].to_numpy()[inside].sum())
                     / n_steps / 2**20 / max(len(ag) / n_steps, 1),
                     "all_gathers_per_step": len(ag) / n_steps})
    table = pd.DataFrame(rows)
    table = table[table["unit"].isin(set(pre["unit"]))].reset_index(drop=True)
    named = [u for u in table["unit"] if u != ROOT]
    target = len({block_of(u) for u in named}) + (ROOT in set(table["unit"]))
    return {"version": "FSDP2", "units": len(table), "target_units": target, "table": table,
            **step_costs(data, used, parts, fsdp, n_steps)}


def _forward_gathers(data: RankData, used: dict[int, int] | None,
                     pre: pd.DataFrame) -> list[float]:
    """The bytes of the all-gathers issued inside FSDP1's pre-forward ranges of the first
    used step, in issue order: one per unit's flat parameter."""
    if pre.empty:
        return []
    first = pre[pre[S.STEP] == pre[S.STEP].min()]
    coll = _in_steps(data.collectives, used)
    gathers = coll[coll[S.COLL_NAME] == "all_gather"].sort_values(S.CPU_TS_NS)
    inside = intervals.holds(spans(first), gathers[S.CPU_TS_NS].to_numpy(np.int64))
    return gathers[S.MSG_BYTES].to_numpy(float)[inside][:MAX_PATTERN_UNITS].tolist()


def step_costs(data: RankData, used: dict[int, int] | None, parts: dict | None,
                ranges: pd.DataFrame, n_steps: int) -> dict:
    """Host ms per step in the FSDP ranges; exposed all-gather / reduce-scatter ms per step;
    the ms per step the GPU waits on its host and the step's ms (from the breakdown)."""
    host = spans(ranges)
    k = _in_steps(data.events[data.events[S.KIND] == S.KIND_KERNEL], used)
    comm = k[(k[S.CLASS] == S.CLS_COMMUNICATION) & k[S.SUBCLASS].isin(EXPOSED_KINDS)]
    comp = k[k[S.CLASS] == S.CLS_COMPUTE]
    exposed = intervals.total(intervals.subtract(spans(comm), spans(comp))) if len(comm) else 0
    coll = _in_steps(data.collectives, used)
    coll = coll[coll[S.COLL_NAME].isin(EXPOSED_KINDS) & coll[S.ON_GPU].astype(bool)]
    out = {"host_ms_per_step": intervals.total(host) / n_steps / 1e6,
           "exposed_comm_ms_per_step": exposed / n_steps / 1e6, "n_steps": n_steps,
           "collectives": exposed_collectives(data, coll),
           "host_idle_ms_per_step": np.nan, "step_ms": np.nan}
    steps = None if parts is None else parts.get("step_breakdown")
    if steps is not None and len(steps):
        u = steps[steps["used"].astype(bool)] if steps["used"].any() else steps
        out["host_idle_ms_per_step"] = float(u[list(HOST_IDLE)].sum(axis=1).mean()) / 1e6
        out["step_ms"] = float(u["step_ns"].mean()) / 1e6
    return out


def combine_fsdp_units(values: dict[int, dict | None], collectives: Result) -> Result:
    """The ranks' FSDP figures (:func:`rank_rows`) and each unit's, by rank; no topic (not
    judged) in a run without FSDP ranges. Each rank's exposed all-gather and reduce-scatter
    time counts without the part spent waiting for a late peer (``collectives``' waits):
    wrapping does not make that peer earlier."""
    for rank, v in values.items():
        if v and len(v.get("collectives", ())):
            waited = waited_ns(v["collectives"], collectives, rank).sum() / v["n_steps"] / 1e6
            v["waiting_ms_per_step"] = min(waited, v["exposed_comm_ms_per_step"])
    ranks = rank_rows(values)
    if ranks is None:
        return Result()
    units = [v["table"].assign(rank=r) for r, v in sorted(values.items())
             if v and v.get("table") is not None]
    table = pd.concat(units, ignore_index=True) if units else pd.DataFrame()
    return Result(tables={RANKS_TABLE: ranks, UNITS_TABLE: table}, facts={"topic": TOPIC})


def rank_rows(values: dict[int, dict | None]) -> pd.DataFrame | None:
    """One row per rank: version, units, target units, FSDP host ms and exposed collective
    ms per step, the GPU's wait on its host, the step, and the wrapping saving (module
    model: NaN where the units cannot be merged)."""
    rows = []
    for rank, v in sorted(values.items()):
        if not v:
            continue
        target = v.get("target_units", np.nan)
        units = v["units"]
        shrink = 1 - target / units if units and target == target and target < units else np.nan
        peer_ms = v.get("waiting_ms_per_step", 0.0)
        waiting = v["host_idle_ms_per_step"] + v["exposed_comm_ms_per_step"] - peer_ms
        rows.append({"rank": rank, "version": v["version"], "units": units,
                     "target_units": target, "units_per_block": v.get("units_per_block", np.nan),
                     "blocks": v.get("blocks", np.nan), "fsdp_host_ms_per_step": v["host_ms_per_step"],
                     "exposed_comm_ms_per_step": v["exposed_comm_ms_per_step"],
                     "peer_wait_ms_per_step": peer_ms,
                     "host_idle_ms_per_step": v["host_idle_ms_per_step"],
                     "step_ms": v["step_ms"], "saving_ms_per_step": waiting * shrink})
    return pd.DataFrame(rows) if rows else None
