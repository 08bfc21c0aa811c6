"""Boilerplate shared by every profkit sample workload.

One place for: command-line options common to all samples, device and process-group setup
(torchrun or plain single process), profiler selection (none / stock ``torch.profiler`` /
``profkit.collectors``), the profiled step loop with its timing, and the end-of-run report.

Only torch and the standard library are imported at module level; ``profkit.collectors`` is
imported lazily, when ``--profiler profkit`` is asked for, so the samples run without it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist

REPO_ROOT = Path(__file__).resolve().parent.parent

# Profiler schedule used by every sample: skip one step, warm up one, record ACTIVE.
PROFILE_WAIT = 1
PROFILE_WARMUP = 1
PROFILE_ACTIVE = 3
# Every record_function range the samples emit starts with this, like profkit's mark().
MARK_PREFIX = "profkit/"
PROFILERS = ("none", "torch", "profkit")


@dataclasses.dataclass(frozen=True)
class Env:
    """Where this process runs: its rank, world and device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    distributed: bool
    """True when a process group was initialised (torchrun, or a script that needs one)."""

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


# ---------------------------------------------------------------------------------- options
def add_common_args(
    parser: argparse.ArgumentParser, *, profiler: str = "profkit", steps: int = 8
) -> argparse.ArgumentParser:
    """Options every sample takes: --out --profiler --steps --device --tiny --active."""
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (trace files / profkit run directory)")
    parser.add_argument("--profiler", choices=PROFILERS, default=profiler,
                        help="none, stock torch.profiler, or profkit.collectors.profile")
    parser.add_argument("--steps", type=int, default=steps, help="number of steps to run")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--tiny", action="store_true",
                        help="tiny sizes for CPU smoke tests (explicit size options still win)")
    parser.add_argument("--with-stack", action="store_true",
                        help="record Python stacks (much larger traces)")
    parser.add_argument("--summarize", action="store_true",
                        help="profkit: write the run's analysis into the run directory at exit")
    parser.add_argument("--active", type=int, default=PROFILE_ACTIVE,
                        help="profiler active steps (schedule wait=1, warmup=1)")
    parser.add_argument("--step-marker", metavar="NAME",
                        help="torch profiler only: no ProfilerStep# ranges; each step is a "
                        "record_function(NAME) range instead (profiler started and stopped "
                        "by hand around the active steps, as scripts without a schedule do)")
    return parser


def sample_parser(doc: str, *, profiler: str = "profkit", steps: int = 8
                  ) -> argparse.ArgumentParser:
    """A sample's parser: its docstring's first line as the description, the common options."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    return add_common_args(parser, profiler=profiler, steps=steps)


def add_size_args(parser: argparse.ArgumentParser, sizes: dict, **helps: str) -> None:
    """One option per key of a size preset (``new_tokens``: ``--new-tokens``), in its order,
    of the type of its value, with the help given for it; left at None, resolve_sizes fills
    it in."""
    for key, value in sizes.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), help=helps.get(key))


def parse_sized(parser: argparse.ArgumentParser, argv: list[str] | None, full: dict,
                tiny: dict, script: str) -> argparse.Namespace:
    """Parse argv, fill the sizes from the presets (resolve_sizes), validate for script."""
    args = resolve_sizes(parser.parse_args(argv), full, tiny)
    validate(args, script)
    return args


def resolve_sizes(args: argparse.Namespace, full: dict, tiny: dict) -> argparse.Namespace:
    """Fill every size option left at None from the full (GPU) or tiny (CPU) presets."""
    for key, value in (tiny if args.tiny else full).items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    return args


def validate(args: argparse.Namespace, script: str) -> None:
    needed = PROFILE_WAIT + PROFILE_WARMUP + args.active
    if args.profiler != "none" and args.steps < needed:
        raise SystemExit(f"{script}: --steps {args.steps} is too few for the profiler "
                         f"schedule (wait+warmup+active = {needed})")
    if args.profiler != "none" and args.out is None:
        args.out = Path("out") / script


# ------------------------------------------------------------------------------- processes
def _pick_device(name: str, local_rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda asked for, but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(args: argparse.Namespace, *, need_group: bool = False) -> Env:
    """Initialise device and, under torchrun (or when need_group), the process group.

    NCCL on CUDA, gloo on CPU. need_group makes a plain ``python script.py`` run as a
    world of one, so that collectives and DDP work without torchrun.
    """
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = _pick_device(args.device, local_rank)
    if not (under_torchrun or need_group):
        return Env(0, 1, 0, device, False)
    if not under_torchrun:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    backend = "nccl" if device.type == "cuda" else "gloo"
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend=backend, **kwargs)
    return Env(dist.get_rank(), dist.get_world_size(), local_rank, device, True)


def teardown(env: Env, *, ok: bool = True) -> None:
    """Leave the process group; the barrier only after success (a failed peer never comes)."""
    if env.distributed and dist.is_initialized():
        if ok:
            dist.barrier()
        dist.destroy_process_group()


def autocast(env: Env, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """bf16 autocast on the run's device, or nothing for fp32."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=env.device.type, dtype=dtype)


def parse_dtype(name: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp32": torch.float32}[name]


def log(env: Env, message: str) -> None:
    """Print on rank 0 only, flushed (torchrun interleaves the ranks' output)."""
    if env.is_main:
        print(message, flush=True)


# -------------------------------------------------------------------------------- profiler
class _NoProfiler:
    def __enter__(self) -> _NoProfiler:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def step(self) -> None:
        return None


def import_profkit_collectors():
    """Import profkit.collectors, also from an uninstalled checkout of this repository.

    The installed package maps ``collectors/`` to ``profkit.collectors``; without an install
    (a machine with no pip), extending ``profkit.__path__`` with the repository root makes
    the same mapping.
    """
    try:
        import profkit.collectors as collectors
        return collectors
    except ImportError:
        pass
    sys.path.insert(0, str(REPO_ROOT))
    import profkit

    if str(REPO_ROOT) not in profkit.__path__:
        profkit.__path__.append(str(REPO_ROOT))
    import profkit.collectors as collectors

    return collectors


class _MarkerProfiler:
    """torch.profiler started by hand at the first active step and stopped after the last,
    with no schedule and no prof.step(): the trace has no ProfilerStep# ranges, only the
    record_function(marker) range run_steps puts around each step."""

    def __init__(self, args: argparse.Namespace, env: Env) -> None:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.is_cuda else [])
        self.prof = profile(activities=acts, record_shapes=True, with_flops=True,
                            with_stack=args.with_stack)
        self.first, self.last = PROFILE_WAIT + PROFILE_WARMUP, PROFILE_WAIT + PROFILE_WARMUP + args.active
        self.path = Path(args.out) / f"rank{env.rank}.marker.pt.trace.json.gz"
        self.steps = 0

    def __enter__(self) -> _MarkerProfiler:
        return self

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.first:
            self.prof.start()
        elif self.steps == self.last:
            self.prof.stop()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.prof.export_chrome_trace(str(self.path))

    def __exit__(self, *exc: object) -> None:
        return None


def make_profiler(args: argparse.Namespace, env: Env):
    """The profiler context asked for by --profiler; each has a step() method."""
    if args.profiler == "none":
        return _NoProfiler()
    if getattr(args, "step_marker", None):
        if args.profiler != "torch":
            raise SystemExit("--step-marker needs --profiler torch")
        return _MarkerProfiler(args, env)
    out = Path(args.out)
    if args.profiler == "profkit":
        collectors = import_profkit_collectors()
        return collectors.profile(
            out, wait=PROFILE_WAIT, warmup=PROFILE_WARMUP, active=args.active, repeat=1,
            record_shapes=True, profile_memory=True, with_flops=True,
            with_stack=args.with_stack, nvml=env.is_cuda, nvml_hz=10.0,
            summarize=getattr(args, "summarize", False))
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.is_cuda else [])
    out.mkdir(parents=True, exist_ok=True)
    return profile(
        activities=activities,
        schedule=schedule(wait=PROFILE_WAIT, warmup=PROFILE_WARMUP, active=args.active,
                          repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(out), worker_name=f"rank{env.rank}",
                                                 use_gzip=True),
        record_shapes=True, profile_memory=True, with_flops=True, with_stack=args.with_stack)


def mark(args: argparse.Namespace, name: str) -> contextlib.AbstractContextManager:
    """A named phase: profkit's mark() under --profiler profkit, else record_function."""
    if args.profiler == "profkit":
        return import_profkit_collectors().mark(name)
    return torch.profiler.record_function(MARK_PREFIX + name)


# ------------------------------------------------------------------------------- step loop
class StepClock:
    """Per-step times in ms without a per-step host synchronisation (also the framework
    samples' time of each optimizer step).

    On CUDA an event is recorded at every step boundary and read after one synchronize at
    the end: a torch.cuda.synchronize() inside every step would itself show up in the
    trace as a host sync that drains the GPU queue, and skew every sample towards
    'host sync'. The deltas between boundary events are the steady-state step period.
    Elsewhere the host clock.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def tick(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def step_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in itertools.pairwise(self.marks)]
        return [(b - a) * 1e3 for a, b in itertools.pairwise(self.marks)]


def run_steps(args: argparse.Namespace, env: Env, step_fn: Callable[[int], object]
              ) -> list[float]:
    """Run step_fn(i) for --steps steps under the chosen profiler; return step times (ms)."""
    clock = StepClock(env.device)
    wall0 = time.perf_counter()
    last_warmup = PROFILE_WAIT + PROFILE_WARMUP - 1
    marker = getattr(args, "step_marker", None)
    with make_profiler(args, env) as prof:
        clock.tick()
        for i in range(args.steps):
            with torch.profiler.record_function(marker) if marker else contextlib.nullcontext():
                step_fn(i)
            clock.tick()
            if i == last_warmup and args.profiler != "none":
                _align(env)
            prof.step()
    times = clock.step_ms()
    if env.is_cuda:
        torch.cuda.synchronize()
    log(env, f"wall time of the step loop (incl. trace export): "
             f"{time.perf_counter() - wall0:.2f} s")
    return times


def _align(env: Env) -> None:
    """Drain the GPU and line the ranks up just before the first recorded step.

    Profiler start-up (CUPTI) takes a different time on each rank; without this, a rank
    whose host never blocks runs its recorded steps seconds ahead of its GPU and its peers.
    It runs at the end of the warm-up step, whose events the profiler discards.
    """
    sync_if_cuda(env)
    if env.distributed:
        dist.barrier()
    sync_if_cuda(env)


def report(args: argparse.Namespace, env: Env, script: str, times_ms: list[float],
           **extra: object) -> None:
    """Print the median step time and a one-line JSON summary on rank 0."""
    steady = times_ms[1:] if len(times_ms) > 2 else times_ms
    median = statistics.median(steady) if steady else float("nan")
    summary = {"script": script, "rank": env.rank, "world_size": env.world_size,
               "device": str(env.device), "profiler": args.profiler, "steps": args.steps,
               "median_step_ms": round(median, 3),
               "step_ms": [round(t, 3) for t in times_ms], **extra}
    if args.out is not None:
        summary["out"] = str(args.out)
    log(env, f"{script}: median step time {median:.3f} ms over {len(steady)} steps "
             f"(world size {env.world_size}, {env.device})")
    log(env, "PROFKIT_SAMPLE " + json.dumps(summary, default=str))


def sync_if_cuda(env: Env) -> None:
    if env.is_cuda:
        torch.cuda.synchronize()


@contextlib.contextmanager
def session(args: argparse.Namespace, *, need_group: bool = False) -> Iterator[Env]:
    """setup() ... teardown(), also when the workload raises."""
    env = setup(args, need_group=need_group)
    try:
        yield env
    except BaseException:
        teardown(env, ok=False)
        raise
    teardown(env)
