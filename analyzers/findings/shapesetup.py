"""Host findings whose wait is setup for new input shapes (:mod:`..measure.shapesetup`):
ops that build a plan or choose an algorithm the first time they see a shape. CUDA graphs
and ``torch.compile(mode="reduce-overhead")`` cannot remove that wait (they need fixed
shapes); fewer distinct shapes can (:func:`shape_setup_host`).

The advice is backed by profkit's own 1 x H200 twins (samples/runs/memory/SHAPES.txt;
``samples/memory_cases.py --case varlen``: GPT, 4 layers, dim 1024, batch 32, bf16, a new
sequence length from 64 to 2048 every step): PyTorch's SDPA choice there is cuDNN's
attention, whose forward and backward took 50-60 ms on each new length and 0.1 ms after,
and the GEMMs 4-20 ms on each new size. The median step (steps 1-9, outside the profiler's
numbers) was 155-167 ms; 34 ms with the lengths padded to multiples of 512 (4 shapes, each
run once before the steps, as after a long run's first steps), although that computes 1.3x
the tokens; 54 ms with FlashAttention (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``), whose
GEMMs still met new sizes.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.result import Finding

HOST_CATEGORIES = ("cpu_launch", "host_work")
MIN_SETUP_FRAC = 0.05  # the GPU's wait inside setup calls, of the step, to be named
MAIN_SHARE = 0.5  # of the host findings' wait: above it, the setup is their cause
TOP_OPS = 3
BUCKETS = (
    "Pad the inputs to a few fixed shapes (bucket the sequence lengths) so that each setup "
    "is paid once, not every step: on profkit's H200 varlen sample (a new length every "
    "step) lengths padded to multiples of 512 cut the median step from 155-167 ms to 34 ms, "
    "although they computed 1.3x the tokens.")
CUDNN_ATTENTION = (
    " cuDNN's attention builds an execution plan for every new shape: for variable lengths, "
    "FlashAttention needs none (with torch.nn.attention.sdpa_kernel(SDPBackend."
    "FLASH_ATTENTION)); on that sample it alone gave 54 ms, the GEMMs still choosing an "
    "algorithm for each new size.")
CUDNN_BENCHMARK = (
    " With torch.backends.cudnn.benchmark = True every new input shape times all "
    "convolution algorithms: turn it off where the shapes keep changing.")
NO_GRAPHS = (" CUDA graphs and torch.compile(mode='reduce-overhead') need fixed shapes: they "
             "do not remove this wait while the shapes change.")


def shape_setup_host(findings: list[Finding], table: pd.DataFrame | None,
                     means: pd.DataFrame, steps: dict[int, int],
                     median_step: dict[int, float]) -> list[Finding]:
    """On each rank whose GPU waits at least :data:`MIN_SETUP_FRAC` of its step inside
    setup calls, in at least half of its used steps (two or more): where that is most of its
    host findings' wait, they become one finding worded for it, with its advice and, as
    saving, the wait inside the setup calls; else the larger host finding names the part of
    it that is setup, its advice and saving unchanged. The wait is a share of the mean used
    step, in ms of the median step, as the part findings give theirs."""
    if table is None or table.empty or means is None or means.empty:
        return findings
    host: dict[int, list[Finding]] = {}
    for f in findings:
        if f.category in HOST_CATEGORIES:
            host.setdefault(f.rank, []).append(f)
    ranks = {}
    for rank, rows in table.groupby("rank", sort=False):
        rank = int(rank)
        used, step_ns = steps.get(rank, 0), _mean_step(means, rank)
        # the wait inside setup calls of the parts that have a finding
        parts = [f"{f.category}_ns" for f in host.get(rank, ())]
        if not (used and step_ns):
            continue
        # each op's wait as a share of the mean used step
        rows = rows.assign(share=rows[parts].to_numpy().sum(axis=1) / used / step_ns)
        frac, with_new = float(rows["share"].sum()), int(rows["rank_steps"].iloc[0])
        if frac >= MIN_SETUP_FRAC and with_new >= max(2, (used + 1) // 2):
            ranks[rank] = (rows, frac, float(median_step.get(rank, 0.0)), with_new, used)
    host = {r: fs for r, fs in host.items() if r in ranks}
    keep = {r: max(fs, key=_saving_ms) for r, fs in host.items()}
    out = []
    for f in findings:
        if f.rank not in keep or f.category not in HOST_CATEGORIES:
            out.append(f)
        elif f is keep[f.rank]:
            out += _reworded(f, ranks[f.rank], host[f.rank])
        elif sum(map(_saving_ms, host[f.rank])) * MAIN_SHARE > ranks[f.rank][1] * ranks[f.rank][2]:
            out.append(f)  # a minor setup share: the other host finding stays as it was
    return out


def _reworded(f: Finding, facts: tuple, host: list[Finding]) -> list[Finding]:
    rows, frac, step_ms, with_new, used = facts
    idle_ms, waits_ms = frac * step_ms, sum(map(_saving_ms, host))
    evidence = {**f.evidence, "setup_idle_ms_per_step": round(idle_ms, 3),
                "setup_steps": with_new, "setup_ops": _ops(rows, step_ms)}
    words = (f"{idle_ms:.1f} ms per step of it inside ops setting up for input shapes they "
             f"had not seen ({_ops(rows, step_ms)}); {with_new} of {used} used steps brought new "
             f"shapes, e.g. {U.clip(str(rows['dims'].iloc[0]), 60)}")
    advice = BUCKETS + (CUDNN_ATTENTION if _any(rows, "cudnn_attention") else "") \
        + (CUDNN_BENCHMARK if _any(rows, "convolution") else "")
    if waits_ms and idle_ms < MAIN_SHARE * waits_ms:  # a part of the wait: named, not its cause
        return [replace(f, message=f"{f.message}; {words}",
                        recommendation=f"{f.recommendation} For the setup: {advice}",
                        evidence=evidence)]
    parts = ", ".join(f"{g.category.replace('cpu_launch', 'launch overhead').replace('_', ' ')} "
                      f"{g.evidence.get('fraction', 0):.0%}" for g in host)
    evidence["folded"] = {g.category: g.message for g in host if g is not f}
    f = replace(f, message=f"rank {f.rank}: the GPU waits on its host ({parts} of the step), "
                f"{words}", recommendation=advice + NO_GRAPHS, evidence=evidence)
    if waits_ms and idle_ms > waits_ms:  # never more than the findings' own wait
        frac, idle_ms = frac * waits_ms / idle_ms, waits_ms
    return [f.with_saving(idle_ms, frac)]


def _ops(rows: pd.DataFrame, step_ms: float) -> str:
    """The top ops: their wait per step, first call and repeat."""
    return "; ".join(
        f"{r['name']} {r['share'] * step_ms:.1f} ms/step, {r['first_ns'] / 1e6:.1f} ms "
        f"on a new shape vs {r['repeat_ns'] / 1e6:.2f} ms after"
        for r in rows.head(TOP_OPS).to_dict("records"))


def _any(rows: pd.DataFrame, word: str) -> bool:
    return bool(rows["name"].astype(str).str.contains(word, regex=False).any())


def _mean_step(means: pd.DataFrame, rank) -> float:
    return float(means.loc[rank, "step_ns"]) if rank in means.index else 0.0


def _saving_ms(f: Finding) -> float:
    return float((f.estimated_saving or {}).get("ms_per_step", 0.0))
