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
from typing import NamedTuple

import pandas as pd
from profkit.analyzers import units as U
from profkit.analyzers.findings.hostfold import (
    fold_host,
    host_findings,
    kept,
    saving_ms,
    waits_words,
)
from profkit.analyzers.result import Finding

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


class _Setup(NamedTuple):
    """A rank's setup: its rows (with each op's ``share`` of the mean used step), their
    share, the median step, the used steps that brought new shapes and the used steps."""

    rows: pd.DataFrame
    frac: float
    step_ms: float
    with_new: int
    used: int

    @property
    def ms(self) -> float:  # the wait inside setup calls, in ms of the median step
        return self.frac * self.step_ms


def shape_setup_host(findings: list[Finding], table: pd.DataFrame | None,
                     means: pd.DataFrame, steps: dict[int, int],
                     median_step: dict[int, float], benchmark: bool | None = None
                     ) -> list[Finding]:
    """On each rank whose GPU waits at least :data:`MIN_SETUP_FRAC` of its step inside
    setup calls, in at least half of its used steps (two or more): where that is the cause
    (:func:`_main`), its host findings become one worded for it, with its advice and, as
    saving, the wait inside the setup calls; else the larger host finding names the part of
    it that is setup, its advice and saving unchanged. The wait is a share of the mean used
    step, in ms of the median step, as the part findings give theirs. ``benchmark``: whether
    cuDNN's benchmark mode was on (run.json's ``torch_settings``); None when not recorded
    (a stock trace): then read from the convolutions' first calls."""
    if table is None or table.empty or means is None or means.empty:
        return findings
    host = host_findings(findings, table["rank"].astype(int).unique().tolist())
    setups = {}
    for rank, fs in host.items():
        used, step_ns = steps.get(rank, 0), _mean_step(means, rank)
        if not (used and step_ns):
            continue
        rows = table[(table["rank"] == rank).to_numpy()]
        # each op's wait, in the parts that have a finding, as a share of the mean used step
        parts = [f"{f.category}_ns" for f in fs]
        rows = rows.assign(share=rows[parts].to_numpy().sum(axis=1) / used / step_ns)
        frac, with_new = float(rows["share"].sum()), int(rows["rank_steps"].iloc[0])
        if frac >= MIN_SETUP_FRAC and with_new >= max(2, (used + 1) // 2):
            setups[rank] = _Setup(rows, frac, float(median_step.get(rank, 0.0)), with_new, used)
    main = {r: host[r] for r, s in setups.items() if _main(s, host[r])}
    out = fold_host(findings, main, lambda f, fs: _folded(f, setups[f.rank], fs, benchmark))
    named = kept({r: host[r] for r in setups if r not in main})
    return [_named(f, setups[f.rank]) if f is named.get(f.rank) else f for f in out]


def _words(setup: _Setup) -> str:
    rows = setup.rows
    return (f"{setup.ms:.1f} ms per step of it inside ops setting up for input shapes they "
            f"had not seen ({_ops(rows, setup.step_ms)}); {setup.with_new} of {setup.used} "
            f"used steps brought new shapes, e.g. {U.clip(str(rows['dims'].iloc[0]), 60)}")


def _evidence(f: Finding, setup: _Setup) -> dict:
    return {**f.evidence, "setup_idle_ms_per_step": round(setup.ms, 3),
            "setup_steps": setup.with_new, "setup_ops": _ops(setup.rows, setup.step_ms)}


def _named(f: Finding, setup: _Setup) -> Finding:
    """A part of the host wait: named in the finding, its advice kept."""
    return replace(f, message=f"{f.message}; {_words(setup)}",
                   recommendation=f"{f.recommendation}{MINOR}", evidence=_evidence(f, setup))


def _folded(f: Finding, setup: _Setup, host: list[Finding], benchmark: bool | None) -> Finding:
    """The cause of the host wait: one finding, its advice, the wait inside the setup calls
    as saving (never more than the host findings' own)."""
    evidence = {**_evidence(f, setup), "folded": {g.category: g.message for g in host
                                                 if g is not f}}
    f = replace(f, message=f"rank {f.rank}: the GPU waits on its host ({waits_words(host)} "
                f"of the step), {_words(setup)}",
                recommendation=_advice(setup.rows, benchmark) + NO_GRAPHS, evidence=evidence)
    frac, idle_ms, waits_ms = setup.frac, setup.ms, sum(map(saving_ms, host))
    if waits_ms and idle_ms > waits_ms:
        frac, idle_ms = frac * waits_ms / idle_ms, waits_ms
    return f.with_saving(idle_ms, frac)


def _main(setup: _Setup, host: list[Finding]) -> bool:
    """Whether the setup is the host findings' cause: most of their wait, and enough of the
    step that fewer shapes pay for their padding (on the CNN sample with benchmark off, a
    setup of 9-22% of the step: padding to multiples of 64 cost more than it saved)."""
    waits_ms = sum(map(saving_ms, host))
    return setup.frac >= MAIN_FRAC and (not waits_ms or setup.ms >= MAIN_SHARE * waits_ms)


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
