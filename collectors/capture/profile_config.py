"""Capture settings, as a frozen keyword-only dataclass."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from profkit.collectors.collector_errors import CollectorError


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """Settings of one ``profile()`` context. Units are in the field names."""

    wait: int = 1
    """Steps skipped at the start of each profiler cycle."""
    warmup: int = 1
    """Steps traced but discarded (warms up Kineto/CUPTI) before the active steps."""
    active: int = 3
    """Steps recorded per cycle."""
    repeat: int = 1
    """Number of cycles (0: repeat until the context exits)."""
    record_shapes: bool = True
    profile_memory: bool = True
    with_flops: bool = True
    with_stack: bool = False
    nvml: Any = True
    """True: sample with pynvml; False: no sampling; else a pynvml-like object (tests)."""
    nvml_hz: float = 10.0
    """NVML sampling rate, samples per second."""
    nvml_gpus: tuple[int | str, ...] | None = None
    """NVML indices or UUIDs to sample; default: this rank's CUDA device."""
    nvml_chunk_s: float = 30.0
    """Seconds of samples per ``nvml/rank{R}.{C}.npz`` chunk."""
    dcgm_url: str | None = None
    """Optional dcgm-exporter URL (``http://host:9400/metrics``), scraped about once a second."""
    steps_on_trigger: int | None = None
    """Steps recorded per triggered capture (default wait + warmup + active)."""
    trigger_every: int | None = None
    """Steps between trigger checks (default: 1 for signal, 10 for file)."""
    min_free_bytes: int = 256 * 2**20
    """Refuse to start with less free space than this in the run directory."""
    summarize: bool = False
    """At exit, each rank reduces its own trace to a summary and rank 0 writes the run's
    analysis (``profkit-report/report.json``, ``profkit-report/report.txt``) into the run directory: a
    cross-rank report the moment the job ends, without moving traces. A rank that failed
    never waits for the others; rank 0 waits at most ``$PROFKIT_SUMMARY_TIMEOUT_S`` seconds
    (300). Only for a capture without a trigger; see :mod:`profkit.collectors.in_job.summarize`."""
    strict: bool = False
    """A capture that cannot start (an unwritable run directory, too little free space,
    another job capturing into it) raises from ``profile()``. By default it warns and the
    job goes on uncaptured, as it does when a write fails during the job."""
    torch_profiler_kwargs: dict[str, Any] = field(default_factory=dict)
    """Passed through to ``torch.profiler.profile``."""

    @property
    def capture_steps(self) -> int:
        if self.steps_on_trigger is not None:
            return max(1, self.steps_on_trigger)
        return max(1, self.wait + self.warmup + self.active)

    def as_json(self) -> dict[str, Any]:
        """The settings recorded in run.json ``profiler``."""
        d = asdict(self)
        d["nvml"] = bool(self.nvml)
        d["torch_profiler_kwargs"] = {k: repr(v) for k, v in self.torch_profiler_kwargs.items()}
        return d


# How far a user's schedule is probed: a schedule still cycling at this step is read as
# "repeat until the context exits" (repeat=0).
SCHEDULE_PROBE_STEPS = 20_000


def schedule_params(schedule: Callable[[int], Any]) -> dict[str, int]:
    """``wait``, ``warmup``, ``active`` and ``repeat`` of a ``torch.profiler.schedule(...)``
    (or any step -> ProfilerAction callable of that shape), found by evaluating it step by
    step and checked step for step against the schedule they describe. ``skip_first`` is
    folded into ``wait`` when the schedule records one cycle (the same steps); with more
    cycles it cannot be expressed and is refused with a CollectorError, as is any
    other shape."""
    names = [getattr(a, "name", str(a)) for a in map(schedule, range(SCHEDULE_PROBE_STEPS))]
    cycles = _cycles(names)
    if not cycles:
        raise CollectorError(f"profile(schedule=...): the schedule saves no trace in its first "
                             f"{SCHEDULE_PROBE_STEPS} steps (no RECORD_AND_SAVE)")
    start, warmup, active = cycles[0]
    wait, repeat = start, 1
    if len(cycles) > 1:
        wait = cycles[1][0] - (start + warmup + active)
        cycle = wait + warmup + active
        # another whole cycle would still fit before the probe's end: the schedule stopped
        repeat = len(cycles) if cycles[-1][0] + 2 * cycle <= SCHEDULE_PROBE_STEPS else 0
    params = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat}
    skip_first = start - wait
    if skip_first < 0 or _schedule_names(**params, skip_first=skip_first, n=len(names)) != names:
        raise CollectorError("profile(schedule=...): the schedule is not of the "
                             "torch.profiler.schedule(wait, warmup, active, repeat) shape")
    if skip_first:
        raise CollectorError(
            f"profile(schedule=...): skip_first={skip_first} with more than one cycle "
            "cannot be expressed; fold it into wait with repeat=1, or skip the steps "
            "before entering profile()")
    return params


def _cycles(names: list[str]) -> list[tuple[int, int, int]]:
    """(first step, warmup steps, active steps) of each complete cycle in ``names``."""
    cycles, i, n = [], 0, len(names)
    while i < n:
        if names[i] == "NONE":
            i += 1
            continue
        start = i
        while i < n and names[i] == "WARMUP":
            i += 1
        record = i
        while i < n and names[i] == "RECORD":
            i += 1
        if i == n:
            break  # cut by the probe's end
        if names[i] != "RECORD_AND_SAVE":
            raise CollectorError(f"profile(schedule=...): unexpected {names[i]} at step {i}")
        i += 1
        cycles.append((start, record - start, i - record))
    return cycles


def _schedule_names(*, wait: int, warmup: int, active: int, repeat: int, skip_first: int,
                    n: int) -> list[str]:
    """The action names of torch.profiler.schedule(...) for steps 0..n-1 (what torch
    documents for it), to check a probed schedule against."""
    cycle, out = wait + warmup + active, ["NONE"] * min(skip_first, n)
    for step in range(n - len(out)):
        k, m = divmod(step, cycle)
        out.append("NONE" if (repeat and k >= repeat) or m < wait
                   else "WARMUP" if m < wait + warmup
                   else "RECORD" if m < cycle - 1 else "RECORD_AND_SAVE")
    return out
