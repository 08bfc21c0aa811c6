"""The parallel layout of a run: its process groups, the dimension each serves, and the
exposed communication of each dimension.

Groups are read from two places per rank: the trace header's ``distributedInfo.pg_config``
(name, description, ranks of every group the rank created) and the collectives table (each
collective's group name, description and ranks, from ``record_param_comms``). A group's
dimension is decided by :mod:`dimensions` (its name when it says, else the pattern of its
traffic over every rank); the ``rule`` column says which.

Exposed communication of a dimension, per rank: the time its communication kernels run with
no compute, copy or memset kernel beside them (what the breakdown charges as
``communication``), inside the steps the verdict uses. Where collectives of two groups
overlap, each instant goes to the group with more kernel time, so the dimensions' shares add
up to the rank's exposed communication.

Tables: ``process_groups`` (one row per group), ``comm_dimensions`` (one row per dimension
and collective: groups, calls and exposed ms per step, share of the step), and
``parallel_layout`` (one row: the layout line, e.g. "4 ranks: dp 2 x tp 2"). Facts:
``labels`` ({group name: "mesh_dp (data parallel, ranks 0,2)"}) and ``dimensions``
({group name: dimension}) for the other measurements to name groups by.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np
import pandas as pd
from profkit.analyzers.measure import dimensions as D
from profkit.analyzers.measure.pipeline import stages_per_rank
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.measure.tensor_parallel import issued_by_model
from profkit.analyzers.result import Result

from profkit import intervals as iv
from profkit import schema as S
from profkit.columns import category_mask, values_in
from profkit.model import RankData, step_spans

GROUP_COLUMNS = ("pg", "description", "ranks", "size", "stages", "dimension", "rule",
                 "collectives", "calls")
DIMENSION_COLUMNS = ("dimension", "collective", "groups", "ranks", "calls_per_step",
                     "exposed_ms_per_step", "step_frac", "rule")
USAGE_COLUMNS = ("pg", "description", "ranks", "size", S.COLL_NAME, "calls", "model_calls",
                 "exposed_ns",
                 "forward_calls", "no_backward_calls", "max_bytes")
BACKWARD_OP = "^autograd::engine::evaluate_function"  # the ops of a backward pass


def rank_layout(data: RankData, used: dict[int, int] | None) -> dict[str, Any]:
    """One rank's share: the groups its header declares, and per (group, collective) its
    calls and exposed ns inside the used steps (``used``: {step: ns}; None: all steps)."""
    dist = (data.meta or {}).get("distributed") or {}
    declared = [{"pg": str(g.get("pg_name", "")), "description": str(g.get("pg_desc") or ""),
                 "ranks": _ranks(g.get("ranks")), "size": _int(g.get("pg_size"))}
                for g in dist.get("pg_config") or [] if isinstance(g, dict)]
    steps = data.steps
    if used is not None and len(steps):
        steps = steps[steps[S.STEP].isin(list(used))]
    return {"declared": declared, "usage": _usage(data, steps), "p2p": _p2p_peers(data),
            "steps": int(len(steps)), "step_ns": float(sum((used or {}).values())),
            "looped": stages_per_rank(data.events) > 1}


def _p2p_peers(data: RankData) -> list[tuple[str, int]]:
    """(group, peer's global rank) of each send / recv the rank made; the peer is a rank
    within the group, mapped through the group's ranks list (as its own rank, where the
    list is cut or absent)."""
    c = data.collectives
    if c is None or c.empty or S.PEER not in c:
        return []
    p2p = c[(c[S.COLL_NAME].astype(str) == D.P2P) & (c[S.PEER] >= 0)]
    out = set()
    for pg, ranks, peer in zip(p2p[S.PG_NAME].astype(str), p2p[S.PG_RANKS], p2p[S.PEER]):
        members = _ranks(ranks)
        out.add((pg, int(members[peer]) if 0 <= peer < len(members) else int(peer)))
    return sorted(out)


def _usage(data: RankData, steps: pd.DataFrame) -> pd.DataFrame:
    c = data.collectives
    if c is None or c.empty:
        return pd.DataFrame({k: [] for k in USAGE_COLUMNS})
    c = c[c[S.STEP].isin(steps[S.STEP])] if len(steps) else c
    pairs = pd.MultiIndex.from_arrays([c[S.PG_NAME].astype(str).to_numpy(),
                                       c[S.COLL_NAME].astype(str).to_numpy()])
    keys, uniques = pd.factorize(pairs, sort=True)
    exposed = _exposed_by_key(data, c, keys, steps)
    forward, no_backward = _phases(data, c)
    model = issued_by_model(data, c)
    rows = []
    for k, (pg, coll) in enumerate(uniques):
        mine = keys == k
        g = c.iloc[np.flatnonzero(mine)]
        rows.append({"pg": pg, "description": str(g[S.PG_DESC].iloc[0]),
                     "ranks": _ranks(g[S.PG_RANKS].iloc[0]), "size": int(g[S.GROUP_SIZE].max()),
                     S.COLL_NAME: coll, "calls": int(len(g)),
                     "model_calls": int(model[mine].sum()),
                     "exposed_ns": float(exposed.get(k, 0.0)),
                     "forward_calls": int(forward[mine].sum()),
                     "no_backward_calls": int(no_backward[mine].sum()),
                     "max_bytes": int(np.nan_to_num(g[S.MSG_BYTES].max()))})
    return pd.DataFrame(rows, columns=list(USAGE_COLUMNS))


def _phases(data: RankData, c: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per collective: issued before its step's backward pass began (the forward pass: a
    tensor-parallel all-reduce of activations; a gradient all-reduce comes later), and in a
    step with no backward pass at all (inference, or no autograd ranges recorded)."""
    ops = data.of_kinds((S.KIND_CPU_OP,), (S.NAME, S.STEP, S.TS_NS))
    bwd = ops[category_mask(ops[S.NAME], BACKWARD_OP)]
    first = bwd.groupby(S.STEP)[S.TS_NS].min() if len(bwd) else pd.Series(dtype="int64")
    issued = np.where(c[S.CPU_TS_NS].to_numpy(np.int64) >= 0, c[S.CPU_TS_NS].to_numpy(np.int64),
                      np.where(c[S.ON_GPU].to_numpy(bool), -1, c[S.TS_NS].to_numpy(np.int64)))
    start = c[S.STEP].map(first).to_numpy(np.float64)
    has_bwd = ~np.isnan(start)
    forward = has_bwd & (issued >= 0) & (issued < np.nan_to_num(start))
    return forward, ~has_bwd


def _exposed_by_key(data: RankData, c: pd.DataFrame, keys: np.ndarray,
                    steps: pd.DataFrame) -> dict[int, float]:
    """ns of each (group, collective) key's GPU kernels with no other GPU work beside them,
    inside the steps; an instant two keys share goes to the one with more kernel time."""
    gpu = data.gpu_events
    work = ~values_in(gpu[S.CLASS], (S.CLS_COMMUNICATION,))
    start = gpu[S.TS_NS].to_numpy(np.int64)[work]
    taken = iv.union(start, start + gpu[S.DUR_NS].to_numpy(np.int64)[work])
    if len(steps):
        lo, hi = step_spans(steps)
        window = iv.union(lo.astype(np.int64), hi.astype(np.int64))
    else:
        window = None
    on_gpu = c[S.ON_GPU].to_numpy(bool)
    ts, dur = c[S.TS_NS].to_numpy(np.int64), c[S.DUR_NS].to_numpy(np.int64)
    order = pd.Series(np.where(on_gpu, dur, 0), index=keys).groupby(level=0).sum()
    out: dict[int, float] = {}
    for key in order.sort_values(ascending=False, kind="stable").index:
        mine = (keys == key) & on_gpu
        spans = iv.union(ts[mine], ts[mine] + dur[mine])
        if window is not None:
            spans = iv.intersect(spans, window)
        free = iv.subtract(spans, taken)
        out[int(key)] = float(iv.total(free))
        taken = iv.union_of(taken, free)
    return out


def _ranks(value: Any) -> tuple[int, ...]:
    """A group's ranks from a list or its text ("[0, 1]"; PyTorch cuts it past 30 ranks)."""
    if isinstance(value, (list, tuple)):
        items = value
    else:
        text = str(value or "").strip().rstrip(".").rstrip(",")
        if not text.startswith("["):
            return ()
        text = text if text.endswith("]") else text.rsplit(",", 1)[0] + "]"
        try:
            items = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return ()
    try:
        return tuple(sorted({int(r) for r in items}))
    except (TypeError, ValueError):
        return ()


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def combine_layout(values: dict[int, dict[str, Any]], world: int) -> Result:
    """The run's layout from every rank's :func:`rank_layout` (module doc); ``world``: the
    run's world size (at least the ranks analysed)."""
    values = {r: v for r, v in values.items() if v}
    usage = pd.concat([v["usage"].assign(rank=r) for r, v in values.items()
                       if len(v["usage"])] or [pd.DataFrame(columns=[*USAGE_COLUMNS, "rank"])],
                      ignore_index=True)
    groups, per_kind = _groups(values, usage, world)
    dims = dict(zip(groups["pg"], groups["dimension"]))
    labels = {pg: D.group_label(desc, pg, dim, ranks) for pg, desc, dim, ranks in zip(
        groups["pg"], groups["description"], groups["dimension"], groups["ranks"])}
    table = _dimension_table(values, usage, groups, per_kind)
    size = dict(zip(groups["pg"], groups["size"]))
    stages = dict(zip(groups["pg"], groups["stages"]))
    degrees: dict[str, int] = {}
    for (pg, kind), (dim, _) in per_kind.items():
        # a pipeline's degree is its chain of stages where the peers are known
        n = int(stages[pg]) if kind == D.P2P and dim == D.PIPELINE and stages.get(pg) \
            else int(size.get(pg, 0))
        if dim != D.UNKNOWN and n >= 2:
            degrees[dim] = max(degrees.get(dim, 0), n)
    order = list(D.SHORT)  # one order whatever the groups' order between processes
    degrees = dict(sorted(degrees.items(), key=lambda dn: order.index(dn[0])
                          if dn[0] in order else len(order)))
    line = D.layout_line(world, degrees)
    layout = pd.DataFrame({"layout": [line], "world_size": [world],
                           "dimensions": [", ".join(f"{D.SHORT.get(d, d)} {n}"
                                                    for d, n in degrees.items())]})
    return Result(tables={"process_groups": groups, "comm_dimensions": table,
                          "parallel_layout": layout if line else layout.iloc[:0]},
                  facts={"topic": "layout", "labels": labels, "dimensions": dims,
                         "layout": line})


def _groups(values: dict[int, dict], usage: pd.DataFrame,
            world: int) -> tuple[pd.DataFrame, dict[tuple[str, str], tuple[str, str]]]:
    """One row per process group seen in a header or a collective, with its dimension; and
    {(group, collective): (dimension, rule)} for every collective seen."""
    found: dict[str, dict[str, Any]] = {}
    for v in values.values():
        for g in v["declared"]:
            _merge(found, g["pg"], g["description"], g["ranks"], g["size"])
    kinds, reduce, calls, doers, model_kinds = _usage_by_group(usage, found)
    edges: dict[str, set] = {}
    for rank, v in values.items():
        for pg, peer in v.get("p2p") or []:
            edges.setdefault(str(pg), set()).add((int(rank), int(peer)))
    # an interleaved pipeline's stages send around a ring (the last rank's stage feeds the
    # first rank's next one): a ring, not ring attention, where every rank ran looped stages
    looped = bool(values) and all(v.get("looped") for v in values.values() if v.get("p2p"))
    chains = {pg: D.p2p_chains(e, looped) for pg, e in edges.items()}
    rows, per_kind = [], {}
    for pg, g in sorted(found.items()):
        size = max(g["size"], len(g["ranks"]))  # 0: the trace does not say
        if size == 0 and doers.get(pg, 0) == world:  # every rank of the run runs it
            size = world
        mine = set(kinds.get(pg, set()))
        dim, rule = D.name_dimension(g["description"], pg)
        decided = ({k: (dim, rule) for k in mine} if dim != D.UNKNOWN
                   else D.pattern_dimensions(mine, size, world, chains.get(pg),
                                             _phase_counts(reduce, pg),
                                             model_kinds.get(pg, set())))
        per_kind.update({(pg, k): v for k, v in decided.items()})
        dims = sorted({d for d, _ in decided.values() if d != D.UNKNOWN})
        stages = max((len(set(c)) for c in chains.get(pg) or []), default=0)
        rows.append({"pg": pg, "description": g["description"],
                     "ranks": rank_ranges(g["ranks"]) if g["ranks"] else "", "size": size,
                     "stages": stages,
                     "dimension": dim if dim != D.UNKNOWN else "+".join(dims) or D.UNKNOWN,
                     "rule": rule or "; ".join(sorted({r for _, r in decided.values() if r})),
                     "collectives": ", ".join(sorted(mine)), "calls": int(calls.get(pg, 0))})
    table = pd.DataFrame(rows, columns=list(GROUP_COLUMNS)).astype(
        {"size": "int64", "stages": "int64", "calls": "int64"})
    return table, per_kind


def _phase_counts(reduce: dict[str, dict[str, int]], pg: str) -> dict[str, int] | None:
    return dict(reduce[pg]) if pg in reduce else None


def _usage_by_group(usage: pd.DataFrame, found: dict) -> tuple[dict, dict, dict, dict, dict]:
    """Every usage row merged into ``found`` (:func:`_merge`), and per group: its collectives
    (a set, in row order), its all_reduce calls by phase with their largest size, its calls,
    how many ranks ran it, and the collectives every call of which the model's layers issued
    (tensor_parallel). One pass over the rows (integer sums, exact) instead of five groupbys
    (~0.5 ms each on the reduce's few rows)."""
    kinds: dict[str, set] = {}
    reduce: dict[str, dict[str, int]] = {}
    calls: dict[str, int] = {}
    doers: dict[str, set] = {}
    by_kind: dict[tuple[str, str], list[int]] = {}
    cols = ("pg", "description", "ranks", "size", S.COLL_NAME, "calls", "model_calls",
            "forward_calls", "no_backward_calls", "max_bytes", "rank")
    for pg, desc, ranks, size, kind, n, model, fwd, nobwd, nbytes, rank in zip(
            *(usage[c].tolist() for c in cols)):
        _merge(found, pg, desc, ranks, size)
        kinds.setdefault(pg, set()).add(kind)
        calls[pg] = calls.get(pg, 0) + n
        doers.setdefault(pg, set()).add(rank)
        pair = by_kind.setdefault((pg, kind), [0, 0])
        pair[0] += n
        pair[1] += model
        if kind == "all_reduce":
            r = reduce.setdefault(pg, {"calls": 0, "forward_calls": 0, "no_backward_calls": 0,
                                       "max_bytes": nbytes})
            r["calls"] += n
            r["forward_calls"] += fwd
            r["no_backward_calls"] += nobwd
            r["max_bytes"] = max(r["max_bytes"], nbytes)
    model_kinds: dict[str, set[str]] = {}  # every call the model's layers' (tensor_parallel)
    for (pg, kind), (n, model) in sorted(by_kind.items()):
        if n > 0 and model == n:
            model_kinds.setdefault(pg, set()).add(kind)
    return kinds, reduce, calls, {pg: len(r) for pg, r in doers.items()}, model_kinds


def _merge(found: dict, pg: str, desc: str, ranks: tuple, size: int) -> None:
    g = found.setdefault(str(pg), {"description": "", "ranks": set(), "size": 0})
    if desc and (not g["description"] or g["description"] in ("undefined", "default_pg")):
        g["description"] = str(desc)
    g["ranks"] = set(g["ranks"]) | set(ranks)
    g["size"] = max(g["size"], int(size or 0))


def _dimension_table(values: dict[int, dict], usage: pd.DataFrame, groups: pd.DataFrame,
                     per_kind: dict[tuple[str, str], tuple[str, str]]) -> pd.DataFrame:
    """Per (dimension, collective): the groups, calls per step and exposed ms per step
    (mean over the ranks analysed), and that time's share of the median used step."""
    if usage.empty:
        return pd.DataFrame(columns=list(DIMENSION_COLUMNS))
    described = dict(zip(groups["pg"].tolist(), groups["description"].tolist()))
    steps = {r: max(v["steps"], 1) for r, v in values.items()}
    step_ns = [v["step_ns"] / v["steps"] for v in values.values() if v["steps"] and v["step_ns"]]
    median_step_ns = float(np.median(step_ns)) if step_ns else np.nan
    n_ranks = max(len(values), 1)
    kind, exposed = usage[S.COLL_NAME].to_numpy(), usage["exposed_ns"].to_numpy()
    keep = np.flatnonzero(~values_in(usage[S.COLL_NAME], D.IGNORED) | (exposed > 0))
    per_rank_steps = np.array([steps[r] for r in usage["rank"].tolist()], dtype=np.int64)
    per_step_calls = usage["calls"].to_numpy() / per_rank_steps  # as Series / Series divides
    per_step_ns = exposed / per_rank_steps
    by: dict[tuple, list[int]] = {}  # groupby(sort=False): first appearance, rows in order
    pgs, ranks = usage["pg"].tolist(), usage["rank"].tolist()
    decided = {}
    for i in keep.tolist():
        decided[i] = per_kind.get((pgs[i], kind[i]), (D.UNKNOWN, ""))
        by.setdefault((decided[i][0], kind[i]), []).append(i)
    rows = []
    for (dim, coll), at in by.items():
        names = sorted({_label(described.get(pgs[i])) or pgs[i] for i in at})
        exposed_ns = float(np.nansum(per_step_ns[at])) / n_ranks  # (Series.sum's)
        rows.append({"dimension": dim, "collective": coll, "groups": ", ".join(names),
                     "ranks": rank_ranges(sorted({ranks[i] for i in at})),
                     "calls_per_step": float(np.nansum(per_step_calls[at])) / n_ranks,
                     "exposed_ms_per_step": exposed_ns / 1e6,
                     "step_frac": exposed_ns / median_step_ns if median_step_ns > 0 else np.nan,
                     "rule": "; ".join(sorted({decided[i][1] for i in at} - {""}))})
    table = pd.DataFrame(rows, columns=list(DIMENSION_COLUMNS))
    return table.sort_values("exposed_ms_per_step", ascending=False,
                             kind="stable").reset_index(drop=True)


def _label(description) -> str:
    """A group's description as its label ("" where there is none: Series.fillna's)."""
    return "" if description is None or description != description else description
