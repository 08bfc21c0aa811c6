"""Synthetic N-rank Kineto runs built from ONE real trace, for scale tests and benchmarks.

FOR SCALE TESTS AND BENCHMARKS ONLY. Every rank is the same source trace with its clock
warped; the skew, stragglers and slow links are planted by a toy model, not measured. Never
use these runs for a correctness claim that needs real data (real skew, real overlap, real
NCCL behaviour): use captured traces for that.

    python -m profkit.trace.synthetic SOURCE OUT_DIR --ranks N [--group-size 8] [--repeat 1]
        [--jitter 0.02] [--straggler R] [--straggler-frac 0.3] [--slow-group H]
        [--slow-factor 4] [--seed 0] [--workers W]

Output: ``OUT_DIR/rank{R}.pt.trace.json.gz`` for R in 0..N-1, each a complete Kineto document
(the source's top-level keys, ``distributedInfo`` for rank R of N, ``hostname`` =
``node{R // group_size:04d}``), and ``OUT_DIR/.profkit/planted.json``: the plan (what was
planted), written last.

Model:

* ``repeat=k`` repeats the source body k times (repetition r shifted by r * (span + 1 ms);
  steps renumbered, ids and flow ids offset so links stay unique; metadata written once).
* Communication kernels, sorted by start, that do not overlap the previous kept one are the
  *anchors*. Anchor j (0-based) runs on the rank's local group ``group{R // group_size}`` when
  j is even, on the global group ``"0"`` when j is odd; other communication kernels go on the
  global group. Kernel and ``record_param_comms`` args are rewritten to match.
* Each rank is late by ``|N(0,1)| * jitter_frac * seg_j`` before anchor j (seg_j: the source
  compute time before it), plus ``straggler_frac * seg_j`` on the straggler. A collective ends
  for all members when the last one arrives (plus ``(slow_factor - 1) * duration`` on local
  collectives of ``slow_group``); that exit time is the members' delay from then on.
* Each rank's time is warped piecewise-linearly (stretched compute segments, shifted
  collectives), so the trace stays consistent: a rank that arrives early waits in the
  kernel, and the work that ran alongside the collective in the source waits for the
  group's last arrival (collectives block, as FSDP's all_gather or the last gradient
  all_reduce before the optimizer step do), so an early rank's GPU idles while it waits.
"""

from __future__ import annotations

import argparse
import gzip
import multiprocessing
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from profkit import schema as S
from profkit.atomic import write_bytes_atomic
from profkit.classify import events as classify
from profkit.trace.repeat import Repeater, read_trace

GAP_US = 1000.0  # idle time between repetitions
COMM_PREFIXES = ("ncclDevKernel_", "ncclKernel_")
RANK_FILE_RE = re.compile(r"^rank(\d+)\.pt\.trace\.json\.gz$")
PLAN_PATH = Path(".profkit") / "planted.json"
GZIP_LEVEL = 6


def _is_comm_kernel(e: dict) -> bool:
    if e.get("ph") != "X" or e.get("cat") != "kernel":
        return False
    return "Collective name" in (e.get("args") or {}) or str(e.get("name", "")).startswith(COMM_PREFIXES)


def repeat_events(doc: dict, repeat: int) -> list[dict]:
    """The source events (in their order, the Trace span lengthened) followed by repetitions
    1..k-1 of the body (:class:`profkit.trace.repeat.Repeater`)."""
    events = doc["traceEvents"]
    if repeat == 1:
        return list(events)
    rep = Repeater(doc, GAP_US)
    spans = dict(zip(map(id, rep.trace_spans), rep.trace_span_events(repeat)))
    out = [spans.get(id(e), e) for e in events]
    for r in range(1, repeat):
        out += rep.events(r)
    return out


def exact_ns(us: np.ndarray) -> np.ndarray:
    """Microsecond floats with 3 decimals -> exact int64 nanoseconds. ``us * 1000`` alone can
    be off by one: near 4.4e12 us a double has only ~3 decimals of precision."""
    ns = np.rint(us * 1000.0)
    ok = ns / 1000.0 == us
    for cand in (ns - 1.0, ns + 1.0):
        fix = ~ok & (cand / 1000.0 == us)
        ns[fix] = cand[fix]
        ok |= fix
    return ns.astype(np.int64)


@dataclass
class Template:
    """One source, repeated, ready to be warped and written once per rank (mutated in place:
    every per-rank field is overwritten for each rank, so the order of ranks does not matter)."""

    doc: dict
    timed: list[dict]  # every non-metadata event with a numeric ts, in output order
    ts_us: np.ndarray
    end_us: np.ndarray  # ts_us where the event has no dur
    ts_ns: np.ndarray  # int64, exact (the source's 3 decimals)
    dur_ns: np.ndarray  # int64, 0 where the event has no dur
    has_dur: np.ndarray
    is_gpu: np.ndarray  # kernels, GPU memcpy and memset
    anchor_idx: np.ndarray  # indices into timed, sorted by start
    a_us: np.ndarray  # anchor starts
    b_us: np.ndarray  # anchor ends
    b0_us: float  # first event's ts
    local_args: list[dict]  # comm args dicts that get the local group
    global_args: list[dict]  # comm args dicts that get the global group
    cpu_args: list[dict]  # comm args dicts on the CPU side (get 'Rank')


def build_template(source: Path, repeat: int) -> Template:
    doc = read_trace(source)
    events = doc["traceEvents"] = repeat_events(doc, repeat)
    timed = [e for e in events if e.get("ph") != "M" and isinstance(e.get("ts"), (int, float))]
    if not timed:
        raise ValueError(f"{source}: no timestamped events")
    ts_us = np.array([e["ts"] for e in timed], dtype=np.float64)
    has_dur = np.array([isinstance(e.get("dur"), (int, float)) for e in timed])
    dur_us = np.array([e["dur"] if h else 0.0 for e, h in zip(timed, has_dur)], dtype=np.float64)
    ts_ns, dur_ns = exact_ns(ts_us), exact_ns(dur_us)
    end_us = (ts_ns + dur_ns) / 1000.0
    comm = sorted((i for i, e in enumerate(timed) if _is_comm_kernel(e)), key=lambda i: ts_us[i])
    anchors: list[int] = []
    for i in comm:
        if not anchors or ts_us[i] >= end_us[anchors[-1]]:
            anchors.append(i)
    # Group of each comm kernel, keyed by External id so the CPU op follows its kernel.
    is_local = {i: j % 2 == 0 for j, i in enumerate(anchors)}
    local_ext: set = set()
    local_args, global_args, cpu_args = [], [], []
    for i in comm:
        args = timed[i].setdefault("args", {})
        (local_args if is_local.get(i, False) else global_args).append(args)
        if is_local.get(i, False) and "External id" in args:
            local_ext.add(args["External id"])
    comm_set = set(comm)
    for i, e in enumerate(timed):
        args = e.get("args")
        if i not in comm_set and isinstance(args, dict) and "Process Group Name" in args:
            (local_args if args.get("External id") in local_ext else global_args).append(args)
            cpu_args.append(args)
    idx = np.array(anchors, dtype=np.int64)
    cats = np.array([e.get("cat") for e in timed], dtype=object)
    is_gpu = np.isin(classify.kinds_for_categories(cats), S.GPU_KINDS)
    return Template(doc, timed, ts_us, end_us, ts_ns, dur_ns, has_dur, is_gpu, idx, ts_us[idx],
                    end_us[idx], float(ts_us.min()), local_args, global_args, cpu_args)


def plan_delays(tpl: Template, n_ranks: int, group_size: int, jitter_frac: float,
                straggler: int | None, straggler_frac: float, slow_group: int | None,
                slow_factor: float, seed: int) -> tuple[np.ndarray, ...]:
    """(late_us, arrive_us, ready_us, exit_us), each (n_ranks, n_anchors): a rank's lateness
    over the compute segment before each anchor, its arrival delay at the anchor, the delay
    of its group's last arrival, and its delay when the anchor ends (all relative to the
    source clock)."""
    m = len(tpl.a_us)
    seg_us = tpl.a_us - np.concatenate(([tpl.b0_us], tpl.b_us[:-1]))
    rng = np.random.default_rng(seed)
    late = np.abs(rng.standard_normal((n_ranks, m))) * jitter_frac * seg_us
    if straggler is not None:
        late[straggler] += straggler_frac * seg_us
    arrive = np.empty((n_ranks, m))
    ready = np.empty((n_ranks, m))
    exit_ = np.empty((n_ranks, m))
    delay = np.zeros(n_ranks)
    for j in range(m):
        arrive[:, j] = delay + late[:, j]
        if j % 2 == 0:  # local groups
            ex = arrive[:, j].reshape(-1, group_size).max(axis=1)
            ready[:, j] = np.repeat(ex, group_size)
            if slow_group is not None:
                ex[slow_group] += (slow_factor - 1.0) * (tpl.b_us[j] - tpl.a_us[j])
            delay = np.repeat(ex, group_size)
        else:  # global group
            delay = np.full(n_ranks, arrive[:, j].max())
            ready[:, j] = delay
        exit_[:, j] = delay
    return late, arrive, ready, exit_


def warp_deltas(tpl: Template, t_us: np.ndarray, late_us: np.ndarray, ready_us: np.ndarray,
                exit_us: np.ndarray, *, with_ratio: bool = False):
    """w(t) - t for one rank, vectorised over t. Pieces: before the first event; for each
    anchor j the compute segment [b_{j-1}, a_j) (stretched) and the collective [a_j, b_j)
    (shifted to when the group's last member arrived: work alongside a collective waits for
    it, so an early rank's GPU idles in the collective); after the last anchor (shifted by
    the final delay)."""
    m = len(tpl.a_us)
    prev_b = np.concatenate(([tpl.b0_us], tpl.b_us[:-1]))
    seg_us = tpl.a_us - prev_b
    prev_delay = np.concatenate(([0.0], exit_us[:-1]))
    bounds = np.empty(2 * m + 1)
    bounds[0], bounds[1::2], bounds[2::2] = tpl.b0_us, tpl.a_us, tpl.b_us
    start = np.empty(2 * m + 2)
    shift = np.zeros(2 * m + 2)
    ratio = np.zeros(2 * m + 2)  # extra time per unit of source time
    start[0] = tpl.b0_us
    start[1:2 * m:2], shift[1:2 * m:2] = prev_b, prev_delay
    ratio[1:2 * m:2] = np.divide(late_us, seg_us, out=np.zeros(m), where=seg_us > 0)
    start[2:2 * m + 1:2], shift[2:2 * m + 1:2] = tpl.a_us, ready_us
    start[-1] = tpl.b_us[-1] if m else tpl.b0_us
    shift[-1] = exit_us[-1] if m else 0.0
    piece = np.searchsorted(bounds, t_us, side="right")
    delta = shift[piece] + (t_us - start[piece]) * ratio[piece]
    return (delta, ratio[piece]) if with_ratio else delta


def _pg_args(name: str, desc: str, ranks: range) -> dict:
    return {"Process Group Name": name, "Process Group Description": desc,
            "Process Group Ranks": str(list(ranks)), "Group size": len(ranks)}


def render_rank(tpl: Template, rank: int, n_ranks: int, group_size: int, late_us: np.ndarray,
                arrive_us: np.ndarray, ready_us: np.ndarray, exit_us: np.ndarray) -> bytes:
    """Rank ``rank``'s complete trace document, gzip-compressed (deterministic bytes)."""
    d_ts, ratio = warp_deltas(tpl, tpl.ts_us, late_us, ready_us, exit_us, with_ratio=True)
    d_end = warp_deltas(tpl, tpl.end_us, late_us, ready_us, exit_us)
    # GPU ops keep their own (stretched) length rather than spanning a jump of the warp: a
    # kernel running when a collective starts does not last until the group is ready.
    dur_us = tpl.end_us - tpl.ts_us
    d_end = np.where(tpl.is_gpu, np.minimum(d_end, d_ts + dur_us * ratio), d_end)
    # Anchors: start when this rank arrives, end when the last member of the group arrives.
    d_ts[tpl.anchor_idx] = arrive_us
    d_end[tpl.anchor_idx] = exit_us
    # In integer ns, so the written values keep exactly 3 decimals (ts' + dur' = end').
    d_ts_ns = np.rint(d_ts * 1000.0).astype(np.int64)
    d_end_ns = np.rint(d_end * 1000.0).astype(np.int64)
    new_ts = ((tpl.ts_ns + d_ts_ns) / 1000.0).tolist()
    new_dur = ((tpl.dur_ns + d_end_ns - d_ts_ns) / 1000.0).tolist()
    for e, ts, dur, has_dur in zip(tpl.timed, new_ts, new_dur, tpl.has_dur.tolist()):
        e["ts"] = ts
        if has_dur:
            e["dur"] = dur
    host = rank // group_size
    local_ranks = range(host * group_size, (host + 1) * group_size)
    local = _pg_args(f"group{host}", "local", local_ranks)
    world = _pg_args("0", "default_pg", range(n_ranks))
    for args in tpl.local_args:
        args.update(local)
    for args in tpl.global_args:
        args.update(world)
    for args in tpl.cpu_args:
        args["Rank"] = rank
    doc = tpl.doc
    dist = dict(doc.get("distributedInfo") or {"backend": "nccl"})
    dist.update(rank=rank, world_size=n_ranks, pg_count=2, pg_config=[
        {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
         "pg_size": n_ranks, "ranks": list(range(n_ranks))},
        {"pg_name": f"group{host}", "pg_desc": "local", "backend_config": "cuda:nccl",
         "pg_size": group_size, "ranks": list(local_ranks)},
    ])
    doc["distributedInfo"] = dist
    doc["hostname"] = f"node{host:04d}"
    return gzip.compress(orjson.dumps(doc), compresslevel=GZIP_LEVEL, mtime=0)


# --- writing, in this process or in a pool ----------------------------------------------
_WORKER: dict = {}


def _init_worker(source: str, repeat: int, n_ranks: int, group_size: int, out_dir: str) -> None:
    _WORKER.update(tpl=build_template(Path(source), repeat), n_ranks=n_ranks,
                   group_size=group_size, out_dir=Path(out_dir))


def _write_job(job: tuple) -> int:
    rank, late_us, arrive_us, ready_us, exit_us = job
    w = _WORKER
    data = render_rank(w["tpl"], rank, w["n_ranks"], w["group_size"], late_us, arrive_us,
                       ready_us, exit_us)
    write_bytes_atomic(w["out_dir"] / f"rank{rank}.pt.trace.json.gz", data)
    return len(data)


def _check_out_dir(out_dir: Path, n_ranks: int) -> None:
    """Refuse a folder holding anything but hidden entries and the rank files of an earlier
    synthetic run; drop that run's plan and its rank files >= n_ranks."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [p.name for p in out_dir.iterdir() if not p.name.startswith(".")]
    ours = [n for n in names if RANK_FILE_RE.match(n)]
    if len(ours) < len(names) or (ours and not (out_dir / PLAN_PATH).exists()):
        raise ValueError(f"{out_dir} holds files not written by profkit.trace.synthetic; "
                         "use an empty folder")
    (out_dir / PLAN_PATH).unlink(missing_ok=True)
    for name in ours:
        if int(RANK_FILE_RE.match(name).group(1)) >= n_ranks:
            (out_dir / name).unlink()


def make_run(source: Path, out_dir: Path, n_ranks: int, *, group_size: int = 8, repeat: int = 1,
             jitter_frac: float = 0.02, straggler: int | None = None, straggler_frac: float = 0.3,
             slow_group: int | None = None, slow_factor: float = 4.0, seed: int = 0,
             workers: int = 1) -> dict:
    """Write a synthetic ``n_ranks``-rank run built from ``source`` to ``out_dir`` and return
    the plan (also written to ``out_dir/.profkit/planted.json``). Scale tests/benchmarks only."""
    source, out_dir = Path(source), Path(out_dir)
    if n_ranks < 1 or group_size < 1 or n_ranks % group_size:
        raise ValueError(f"n_ranks ({n_ranks}) must be a positive multiple of group_size ({group_size})")
    n_groups = n_ranks // group_size
    if straggler is not None and not 0 <= straggler < n_ranks:
        raise ValueError(f"straggler {straggler} is not a rank of 0..{n_ranks - 1}")
    if slow_group is not None and not 0 <= slow_group < n_groups:
        raise ValueError(f"slow_group {slow_group} is not a group of 0..{n_groups - 1}")
    if repeat < 1 or workers < 1:
        raise ValueError("repeat and workers must be >= 1")
    if jitter_frac < 0 or straggler_frac < 0 or slow_factor < 1:
        raise ValueError("jitter_frac and straggler_frac must be >= 0, slow_factor >= 1")
    _check_out_dir(out_dir, n_ranks)

    tpl = build_template(source, repeat)
    late, arrive, ready, exit_ = plan_delays(tpl, n_ranks, group_size, jitter_frac, straggler,
                                      straggler_frac, slow_group, slow_factor, seed)
    jobs = [(r, late[r], arrive[r], ready[r], exit_[r]) for r in range(n_ranks)]
    init = (str(source), repeat, n_ranks, group_size, str(out_dir))
    if workers == 1:
        _WORKER.update(tpl=tpl, n_ranks=n_ranks, group_size=group_size, out_dir=out_dir)
        try:
            gz_bytes = sum(map(_write_job, jobs))
        finally:
            _WORKER.clear()
    else:
        del tpl  # each worker builds its own
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(min(workers, n_ranks), initializer=_init_worker, initargs=init) as pool:
            gz_bytes = sum(pool.imap_unordered(_write_job, jobs, chunksize=8))

    plan = {
        "synthetic": True,
        "note": "planted by profkit.trace.synthetic: for scale tests/benchmarks only, not real data",
        "source": str(source.resolve()), "n_ranks": n_ranks, "group_size": group_size,
        "n_groups": n_groups, "repeat": repeat, "jitter_frac": jitter_frac,
        "straggler": straggler, "straggler_frac": straggler_frac, "slow_group": slow_group,
        "slow_group_ranks": (list(range(slow_group * group_size, (slow_group + 1) * group_size))
                             if slow_group is not None else []),
        "slow_factor": slow_factor, "seed": seed, "n_anchor_collectives": int(late.shape[1]),
        "gz_bytes": int(gz_bytes),
    }
    write_bytes_atomic(out_dir / PLAN_PATH, orjson.dumps(plan, option=orjson.OPT_INDENT_2))
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m profkit.trace.synthetic",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="one real Kineto trace (.json or .json.gz)")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--group-size", type=int, default=8, help="ranks per host / local group")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--jitter", type=float, default=0.02, help="jitter, fraction of compute time")
    ap.add_argument("--straggler", type=int, default=None)
    ap.add_argument("--straggler-frac", type=float, default=0.3)
    ap.add_argument("--slow-group", type=int, default=None)
    ap.add_argument("--slow-factor", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        plan = make_run(a.source, a.out_dir, a.ranks, group_size=a.group_size, repeat=a.repeat,
                        jitter_frac=a.jitter, straggler=a.straggler,
                        straggler_frac=a.straggler_frac, slow_group=a.slow_group,
                        slow_factor=a.slow_factor, seed=a.seed, workers=a.workers)
    except (ValueError, OSError) as exc:
        print(f"profkit.trace.synthetic: {exc}", file=sys.stderr)
        return 2
    print(f"synthetic run: {plan['n_ranks']} ranks ({plan['n_groups']} groups of "
          f"{plan['group_size']}), repeat {plan['repeat']}, {plan['n_anchor_collectives']} "
          f"anchor collectives, straggler {plan['straggler']}, slow group {plan['slow_group']}, "
          f"{plan['gz_bytes'] / 1e6:.1f} MB gz in {time.perf_counter() - t0:.1f} s -> {a.out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
