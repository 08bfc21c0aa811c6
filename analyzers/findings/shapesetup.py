"""Host findings whose wait is setup for new input shapes (:mod:`..measure.shapesetup`):
ops that build a plan or choose an algorithm the first time they see a shape. CUDA graphs
and ``torch.compile(mode="reduce-overhead")`` cannot remove that wait (they need fixed
shapes); fewer distinct shapes can (:func:`shape_setup_host`).

The advice is backed by profkit's own 1 x H200 twins (samples/runs/memory/SHAPES.txt, the
workloads' own step times, median of steps 1-9):

- ``samples/memory_cases.py --case varlen`` (GPT, 4 layers, dim 1024, batch 32, bf16, a new
  sequence length from 64 to 2048 every step): PyTorch's SDPA choice there is cuDNN's
  attention, whose forward and backward took 50-60 ms on each new length and 0.1 ms after,
  and the GEMMs 4-20 ms on each new size. 155-167 ms a step; 34 ms with the lengths padded
  to multiples of 512 (4 shapes, each run once before the steps, as after a long run's first
  steps), with 1.3x the tokens; 54 ms with FlashAttention, whose GEMMs still met new sizes.
- ``samples/zoo/conv_shapes.py`` (6 convolutions of 128 channels, batch 32, a new image side
  from 96 to 320 every step): with ``cudnn.benchmark`` on, a convolution's first call on a
  shape took 48-620 ms; 634-690 ms a step. With benchmark off, 3-4 ms and 27-29 ms; with the
  sides padded to multiples of 64, 32 ms. With benchmark off the setup was 9% and 22% of
  the step in two captures, and padding would have cost more than it saves (32 ms padded
  against 29 ms): below :data:`MAIN_FRAC` the setup is named and the host finding's advice
  kept. Every capture above it (79-90%) was measured 80-95% faster with fewer shapes.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.result import Finding

HOST_CATEGORIES = ("cpu_launch", "host_work")
MIN_SETUP_FRAC = 0.05  # the GPU's wait inside setup calls, of the step, to be named
MAIN_SHARE = 0.5  # of the host findings' wait: above it, the setup is their cause...
MAIN_FRAC = 0.3  # ...when it is at least this share of the step (less: padding may cost more)
TOP_OPS = 3
BENCHMARK_MIN_NS = 10_000_000  # a convolution's first call this long: benchmark mode
BUCKETS = (
    "Pad the inputs to a few fixed shapes (bucket them): each setup is paid once per shape, "
    "so with a few shapes it ends in the first steps instead of recurring for as long as new "
    "shapes keep coming; padding adds work, so it pays where the setup costs more.")
MINOR = (" The setup is paid once per shape: fewer distinct shapes (bucketed, where the "
         "padding costs less than the setup) end it sooner.")
SEQUENCE_TWIN = (
    " On profkit's H200 GPT sample (a new sequence length every step) lengths padded to "
    "multiples of 512 cut the median step from 155-167 ms to 34 ms, with 1.3x the tokens.")
IMAGE_TWIN = (
    " On profkit's H200 CNN sample (a new image side every step, cudnn.benchmark on) sides "
    "padded to multiples of 64 cut the median step from 634-690 ms to 32 ms.")
CUDNN_ATTENTION = (
    " cuDNN's attention builds an execution plan for every new shape: for variable lengths, "
    "FlashAttention needs none (with torch.nn.attention.sdpa_kernel(SDPBackend."
    "FLASH_ATTENTION)); on the GPT sample it alone gave 54 ms, the GEMMs still choosing an "
    "algorithm for each new size.")
CUDNN_BENCHMARK = (
    " Convolutions that take {ms:.0f} ms on a new shape are cuDNN's benchmark mode timing "
    "every algorithm (torch.backends.cudnn.benchmark = True): turn it off where the shapes "
    "keep changing (on the CNN sample 27-29 ms a step instead of 634-690 ms, its "
    "convolutions' first calls 3-4 ms instead of 48-620 ms).")
NO_GRAPHS = (" CUDA graphs and torch.compile(mode='reduce-overhead') need fixed shapes: they "
             "do not remove this wait while the shapes change.")


def shape_setup_host(findings: list[Finding], table: pd.DataFrame | None,
                     means: pd.DataFrame, steps: dict[int, int],
                     median_step: dict[int, float], benchmark: bool | None = None
                     ) -> list[Finding]:
    """On each rank whose GPU waits at least :data:`MIN_SETUP_FRAC` of its step inside
    setup calls, in at least half of its used steps (two or more): where that is most of its
    host findings' wait, they become one finding worded for it, with its advice and, as
    saving, the wait inside the setup calls; else the larger host finding names the part of
    it that is setup, its advice and saving unchanged. The wait is a share of the mean used
    step, in ms of the median step, as the part findings give theirs. ``benchmark``: whether
    cuDNN's benchmark mode was on (run.json's ``torch_settings``); None when not recorded
    (a stock trace): then read from the convolutions' first calls."""
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
            out += _reworded(f, ranks[f.rank], host[f.rank], benchmark)
        elif not _main(ranks[f.rank][1], ranks[f.rank][2], sum(map(_saving_ms, host[f.rank]))):
            out.append(f)  # a minor setup share: the other host finding stays as it was
    return out


def _reworded(f: Finding, facts: tuple, host: list[Finding], benchmark: bool | None
              ) -> list[Finding]:
    rows, frac, step_ms, with_new, used = facts
    idle_ms, waits_ms = frac * step_ms, sum(map(_saving_ms, host))
    evidence = {**f.evidence, "setup_idle_ms_per_step": round(idle_ms, 3),
                "setup_steps": with_new, "setup_ops": _ops(rows, step_ms)}
    words = (f"{idle_ms:.1f} ms per step of it inside ops setting up for input shapes they "
             f"had not seen ({_ops(rows, step_ms)}); {with_new} of {used} used steps brought new "
             f"shapes, e.g. {U.clip(str(rows['dims'].iloc[0]), 60)}")
    advice = _advice(rows, benchmark)
    if not _main(frac, step_ms, waits_ms):  # a part of the wait: named, advice kept
        return [replace(f, message=f"{f.message}; {words}",
                        recommendation=f"{f.recommendation}{MINOR}", evidence=evidence)]
    parts = ", ".join(f"{g.category.replace('cpu_launch', 'launch overhead').replace('_', ' ')} "
                      f"{g.evidence.get('fraction', 0):.0%}" for g in host)
    evidence["folded"] = {g.category: g.message for g in host if g is not f}
    f = replace(f, message=f"rank {f.rank}: the GPU waits on its host ({parts} of the step), "
                f"{words}", recommendation=advice + NO_GRAPHS, evidence=evidence)
    if waits_ms and idle_ms > waits_ms:  # never more than the findings' own wait
        frac, idle_ms = frac * waits_ms / idle_ms, waits_ms
    return [f.with_saving(idle_ms, frac)]


def _main(frac: float, step_ms: float, waits_ms: float) -> bool:
    """Whether the setup is the host findings' cause: most of their wait, and enough of the
    step that fewer shapes pay for their padding (on the CNN sample with benchmark off, a
    setup of 9-22% of the step: padding to multiples of 64 cost more than it saved)."""
    return frac >= MAIN_FRAC and (not waits_ms or frac * step_ms >= MAIN_SHARE * waits_ms)


def _advice(rows: pd.DataFrame, benchmark: bool | None) -> str:
    """Fewer shapes, with the twin that measured it; the library's own remedy where the ops
    name it (cuDNN's attention; convolutions in benchmark mode: as recorded, else by their
    first calls)."""
    names = rows["name"].astype(str)
    conv = names.str.contains("convolution", regex=False).to_numpy()
    text = BUCKETS + (IMAGE_TWIN if conv.any() else SEQUENCE_TWIN)
    if names.str.contains("cudnn_attention", regex=False).any():
        text += CUDNN_ATTENTION
    slowest = rows.loc[conv, "first_ns"].max() if conv.any() else 0
    if conv.any() and (benchmark if benchmark is not None else slowest >= BENCHMARK_MIN_NS):
        text += CUDNN_BENCHMARK.format(ms=slowest / 1e6)
    return text


def _ops(rows: pd.DataFrame, step_ms: float) -> str:
    """The top ops: their wait per step, first call and repeat."""
    return "; ".join(
        f"{r['name']} {r['share'] * step_ms:.1f} ms/step, {r['first_ns'] / 1e6:.1f} ms "
        f"on a new shape vs {r['repeat_ns'] / 1e6:.2f} ms after"
        for r in rows.head(TOP_OPS).to_dict("records"))


def _mean_step(means: pd.DataFrame, rank) -> float:
    return float(means.loc[rank, "step_ns"]) if rank in means.index else 0.0


def _saving_ms(f: Finding) -> float:
    return float((f.estimated_saving or {}).get("ms_per_step", 0.0))
