"""What acting on several findings at once would save: savings that share time are not added.

Each finding's ``estimated_saving`` is what fixing that cause alone gives back on its rank.
Several of them may remove the same time, so their sum can pass the step (issue 42:
``frameworks/hf_trainer`` rank 1: 14.62 + 16.74 + 7.33 ms of a 44 ms step). The rule, per
rank ``r`` (the members: the warning and critical findings with a saving per used step):

1. **Disjoint parts add.** The charged-time model gives every instant of a step to one part
   (``measure/charge.py``), so the savings of findings about different parts (launch
   overhead, host work, data loading, host syncs, copies, communication, ...) remove
   different time and add.
2. **Compute shares.** Findings about the compute part's kernels (precision, memory-bound,
   fusion, recompute, fp8, MFU, and any category not named here) may act on the same
   kernels: together they count as the largest of them.
3. **Slow calls and recompute's idle are host idle.** A slow runtime call's saving (GPU
   idle inside the call) is time of a host-idle part, and so is the part of activation
   recompute's saving that is GPU idle while the host runs the recompute (its ``idle_ns``;
   its kernels' time, ``recompute_ns``, is compute): the host-idle parts count as the
   larger of their sum and those.
4. **A straggler is its own rank's lateness seen from the others.** Its saving (what the
   others wait for it) comes off every other rank's step. On its own rank it is the same
   time as its host-idle findings when its host is the cause (``host_excess_ms_per_step``
   in its evidence), else as its compute findings: that bucket counts as the larger of the
   two. Acting on that rank's host-idle findings alone also ends the others' wait, up to
   the straggler's saving.
5. **The job waits for its slowest rank.** Each rank's step after the fix is its median
   step less its buckets (never below zero). The rank slowest after the fix sets the job's
   step: the combined saving is what that rank's step loses, as a fraction of its step, so
   never above the step and never below zero (the ranks of a synchronous job have the same
   step, up to noise; a rank with nothing to fix keeps the job's step where it is).

:func:`combined_saving` applies it to every member; :func:`biggest_win` to each group of
members that share time (rules 2-4 join them, and so does one category on several ranks:
one fix, folded into one finding by the reports), and names the group that saves the most.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd
from profkit.analyzers.parts import HOST_IDLE, PARTS
from profkit.analyzers.result import Finding

HOST_CALLS = ("runtime_calls", "allocator_churn", "idle_code")  # GPU idle inside host calls
OWN_PARTS = tuple(p for p in PARTS if p != "compute")  # rule 1: one bucket each
ACTIONABLE = ("critical", "warning")


def members(findings: Iterable[Finding]) -> list[Finding]:
    """The findings whose savings may combine: actionable, with a finite saving per used
    step (not per compiling step or per sample)."""
    out = []
    for f in findings:
        s = f.estimated_saving or {}
        ms = s.get("ms_per_step")
        if (f.severity in ACTIONABLE and not s.get("per") and isinstance(ms, (int, float))
                and math.isfinite(ms) and ms > 0):
            out.append(f)
    return out


def _bucket(f: Finding) -> str:
    if f.category in OWN_PARTS:
        return f.category
    if f.category in HOST_CALLS:
        return "host_calls"
    return "compute"


def _pieces(f: Finding) -> list[tuple[str, float]]:
    """(bucket, ms per step) of ``f``'s saving: activation recompute's is its kernels'
    time (compute) and the GPU idle while the host runs them again (host idle, rule 3), in
    the shares of its evidence; any other finding's is one piece."""
    total, idle = f.evidence.get("saving_ns"), f.evidence.get("idle_ns")
    if f.category == "recompute" and _positive(total) and _positive(idle):
        host = _ms(f) * min(float(idle) / float(total), 1.0)
        return [("compute", _ms(f) - host), ("host_calls", host)]
    return [(_bucket(f), _ms(f))]


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _recompute_idles(f: Finding) -> bool:
    return len(_pieces(f)) > 1


def _host_caused(straggler: Finding) -> bool:
    return bool(straggler.evidence.get("host_excess_ms_per_step"))


def _ms(f: Finding) -> float:
    return float(f.estimated_saving["ms_per_step"])


def _after_ms(acting: list[Finding], step_ms: dict[int, float],
              stragglers: list[Finding]) -> dict[int, float]:
    """Each rank's step, in ms, once ``acting`` are fixed (module doc, rules 1-4); the
    ``stragglers`` among all members (rule 4: their rank's host findings end their wait)."""
    buckets: dict[int, dict[str, float]] = {r: {} for r in step_ms}
    for f in acting:
        if f.category == "straggler":
            continue
        for r in [f.rank] if f.rank is not None else list(step_ms):
            if r in buckets:
                own = buckets[r]
                for b, ms in _pieces(f):
                    own[b] = max(own.get(b, 0.0), ms) if b in ("compute", "host_calls") \
                        else own.get(b, 0.0) + ms
    removed = {r: 0.0 for r in step_ms}
    for r, own in buckets.items():
        host = max(sum(own.get(p, 0.0) for p in HOST_IDLE), own.get("host_calls", 0.0))
        late = [s for s in acting if s.category == "straggler" and s.rank == r]
        compute = own.get("compute", 0.0)
        for s in late:
            if _host_caused(s):
                host = max(host, _ms(s))
            else:
                compute = max(compute, _ms(s))
        rest = sum(v for k, v in own.items() if k in OWN_PARTS and k not in HOST_IDLE)
        removed[r] += host + compute + rest
    for s in stragglers:
        if s in acting:
            wait = _ms(s)
        elif _host_caused(s):
            wait = min(_ms(s), _host_ms(buckets.get(s.rank, {})))
        else:
            continue
        for r in step_ms:
            if r != s.rank:
                removed[r] += wait
    return {r: max(step_ms[r] - removed[r], 0.0) for r in step_ms}



def _host_ms(own: dict[str, float]) -> float:
    return max(sum(own.get(p, 0.0) for p in HOST_IDLE), own.get("host_calls", 0.0))


def _saving(found: list[Finding], acting: list[Finding],
            step_ms: dict[int, float]) -> tuple[float, float, float]:
    """(ms per step, fraction of the step, the step in ms) that fixing ``acting`` of the
    members ``found`` saves, on the rank that stays slowest (rule 5)."""
    stragglers = [f for f in found if f.category == "straggler"]
    after = _after_ms(acting, step_ms, stragglers)
    slowest = max(after, key=lambda r: (after[r], step_ms[r]))
    before = step_ms[slowest]
    ms = min(max(before - after[slowest], 0.0), before)
    return ms, ms / before if before > 0 else float("nan"), before


def share_groups(found: list[Finding]) -> list[list[Finding]]:
    """``found`` split into groups of findings that share time (module doc, rules 2-4), each
    in the order of ``found``."""
    parent = list(range(len(found)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    def shares(a: Finding, b: Finding) -> bool:
        if a.category == "straggler" or b.category == "straggler":
            s, o = (a, b) if a.category == "straggler" else (b, a)
            if o.category == "straggler" or o.rank != s.rank:
                return False
            host = _bucket(o) in HOST_IDLE or _bucket(o) == "host_calls"
            return host if _host_caused(s) else _bucket(o) == "compute"
        if a.category == b.category:
            return True  # one fix on several ranks (the report folds them into one finding)
        if a.rank is not None and b.rank is not None and a.rank != b.rank:
            return False
        ba, bb = _bucket(a), _bucket(b)
        if ba == bb == "compute":
            return True
        for x, y in ((a, b), (b, a)):  # recompute's idle is host-idle time (rule 3)
            if _recompute_idles(x) and (_bucket(y) in HOST_IDLE or _bucket(y) == "host_calls"):
                return True
        calls = {ba, bb} & {"host_calls"}
        return bool(calls) and ({ba, bb} - calls) <= set(HOST_IDLE) | {"host_calls"}

    for i in range(len(found)):
        for j in range(i):
            if shares(found[i], found[j]):
                parent[root(i)] = root(j)
    groups: dict[int, list[Finding]] = {}
    for i, f in enumerate(found):
        groups.setdefault(root(i), []).append(f)
    return list(groups.values())


def _steps(ranks: pd.DataFrame) -> dict[int, float]:
    if ranks is None or ranks.empty or "step_time_ms" not in ranks:
        return {}
    return {int(r): float(ms) for r, ms in zip(ranks["rank"].tolist(),
                                               ranks["step_time_ms"].tolist())
            if math.isfinite(float(ms)) and float(ms) > 0}


def _member(f: Finding) -> dict:
    return {"category": f.category, "rank": f.rank,
            "ms_per_step": f.estimated_saving["ms_per_step"],
            "fraction": f.estimated_saving["fraction"]}



def biggest_win(findings: Iterable[Finding], ranks: pd.DataFrame) -> dict | None:
    """The group of findings sharing time that would save the most, alone: ``lead`` (its
    first finding, in the analysis' order), ``members``, ``ms_per_step``, ``fraction`` (of
    the step of the rank slowest after the fix, ``step_ms``); None without one."""
    found, step_ms = members(findings), _steps(ranks)
    if not found or not step_ms:
        return None
    best = None
    for group in share_groups(found):
        ms, frac, step = _saving(found, group, step_ms)
        if ms > 0 and (best is None or ms > best[1] * 1.02):  # a near tie: the earlier group
            best = (group, ms, frac, step)
    if best is None:
        return None
    group, ms, frac, step = best
    return {"lead": _member(group[0]), "members": [_member(f) for f in group],
            "ms_per_step": round(ms, 3), "fraction": round(frac, 4), "step_ms": round(step, 3)}


def combined_saving(findings: Iterable[Finding], ranks: pd.DataFrame) -> dict | None:
    """One estimate for acting on every member (module doc), when there are two or more:
    ``ms_per_step``, ``fraction`` (of the job's step), ``step_ms``, ``sum_ms`` (what their
    savings add up to), ``members`` and ``shared`` (the groups of two or more members that
    share time, as indices into ``members``); None otherwise."""
    found, step_ms = members(findings), _steps(ranks)
    if len(found) < 2 or not step_ms:
        return None
    ms, frac, step = _saving(found, found, step_ms)
    index = {id(f): i for i, f in enumerate(found)}
    shared = [[index[id(f)] for f in g] for g in share_groups(found) if len(g) > 1]
    return {"ms_per_step": round(ms, 3), "fraction": round(frac, 4), "step_ms": round(step, 3),
            "sum_ms": round(sum(_ms(f) for f in found), 3),
            "members": [_member(f) for f in found], "shared": shared}
