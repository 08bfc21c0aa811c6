"""Ground truth measured by the workload itself, independently of any profiler's analysis.

Used by the "why" samples (``samples/capture_why.sh``) on top of ``common.py``:

* ``count_flops(fn)``: FLOPs of one call of ``fn`` as ``torch.utils.flop_counter`` counts them
  (matmul, convolution and attention only: elementwise ops, norms and optimizers count 0).
  Run once, unprofiled, before the step loop. ``count_tensor_bytes(fn)``: the bytes every
  aten op of one call reads and writes (its tensor arguments and results).
* ``split_times(times, active)``: the step times of ``common.run_steps`` split into the
  profiled steps and the clean steps after the trace export (the step right after the last
  active one also pays for writing the trace and is left out of both).
* ``HostClock``: per-step wall time of named host-side phases (``time.perf_counter``), e.g.
  the CPU optimizer or the preprocessing, reported as per-phase medians.
* ``NcuWindow``: ``--ncu-step I`` brackets step I with ``cudaProfilerStart/Stop`` so that
  ``ncu --profile-from-start off`` measures the kernels of that one steady step only.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

import common
import torch


def add_truth_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ncu-step", type=int, default=None, metavar="I",
                        help="bracket step I with cudaProfilerStart/Stop (for ncu "
                        "--profile-from-start off); use with --profiler none")


def truth_parser(doc: str, *, steps: int = 10) -> argparse.ArgumentParser:
    """The parser of a "why" sample: common.sample_parser's options and --ncu-step."""
    parser = common.sample_parser(doc, steps=steps)
    add_truth_args(parser)
    return parser


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of fn, as FlopCounterMode counts them (mm/conv/sdpa only)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def count_tensor_bytes(fn: Callable[[], object]) -> int:
    """Bytes of every tensor argument and result of every aten op one call of fn runs.

    For an eager chain of ops on tensors much larger than the L2 cache this is the DRAM
    traffic it cannot avoid (each op reads its inputs and writes its outputs once).
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    total = 0

    class _Bytes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal total
            out = func(*args, **(kwargs or {}))
            for leaf in tree_leaves((args, kwargs or {}, out)):
                if isinstance(leaf, torch.Tensor):
                    total += leaf.numel() * leaf.element_size()
            return out

    with _Bytes():
        fn()
    return total


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def split_times(times: list[float], active: int) -> dict[str, object]:
    """Medians of the profiled steps and of the clean steps after the trace export."""
    first = common.PROFILE_WAIT + common.PROFILE_WARMUP
    profiled = times[first:first + active]
    clean = times[first + active + 1:]
    return {"profiled_median_ms": _median(profiled), "unprofiled_median_ms": _median(clean),
            "unprofiled_steps": len(clean)}


def run_measured(args: argparse.Namespace, env: common.Env, step_fn: Callable[[int], object]
                 ) -> tuple[list[float], dict[str, object]]:
    """common.run_steps with step --ncu-step bracketed (NcuWindow): the step times and
    their split_times."""
    times = common.run_steps(args, env, NcuWindow(args, env).wrap(step_fn))
    return times, split_times(times, args.active)


def achieved_tflops(flop_per_step: float, split: dict[str, object]) -> float:
    """TFLOP/s at the median unprofiled step of split (nan without one), to 0.1."""
    clean = split["unprofiled_median_ms"] or float("nan")
    return round(flop_per_step / (clean * 1e-3) / 1e12, 1)


class HostClock:
    """Wall time of named host-side phases, per step: ``with clock("adam"): ...``."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def new_step(self) -> None:
        self.steps.append(defaultdict(float))

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if not self.steps:
                self.new_step()
            self.steps[-1][name] += (time.perf_counter() - t0) * 1e3

    def medians(self, skip: int = 2) -> dict[str, float]:
        """Per phase, the median ms per step over the steps after the first ``skip``."""
        steps = self.steps[skip:] if len(self.steps) > skip else self.steps
        names = sorted({name for s in steps for name in s})
        out = {f"host_{name}_ms": _median([s.get(name, 0.0) for s in steps]) for name in names}
        out["host_total_ms"] = _median([sum(s.values()) for s in steps])
        return out


class NcuWindow:
    """cudaProfilerStart before step --ncu-step, cudaProfilerStop after it (CUDA only)."""

    def __init__(self, args: argparse.Namespace, env: common.Env) -> None:
        self.step = args.ncu_step if env.is_cuda else None

    def before(self, i: int) -> None:
        if i == self.step:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()

    def after(self, i: int) -> None:
        if i == self.step:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()

    def wrap(self, step_fn: Callable[[int], object]) -> Callable[[int], None]:
        if self.step is None:
            return step_fn

        def wrapped(i: int) -> None:
            self.before(i)
            step_fn(i)
            self.after(i)

        return wrapped
