"""Capture settings, as a frozen keyword-only dataclass."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    (300). Only for a capture without a trigger; see :mod:`profkit.collectors.job_summary`."""
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
