"""``profile()``: the public capture context (context manager, decorator, ``.step()``)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from profkit.collectors.capture.profile_config import ProfileConfig, schedule_params
from profkit.collectors.capture.session import CaptureSession
from profkit.collectors.capture.signals import TermHandler, signal_error
from profkit.collectors.capture.trigger import DEFAULT_EVERY, SignalTrigger, make_trigger
from profkit.collectors.collector_errors import CollectorError
from profkit.collectors.in_job.summarize import summarize_job
from profkit.collectors.job_facts import dist as pdist

log = logging.getLogger(__name__)

RUN_DIR_ENV = "PROFKIT_RUN_DIR"
# Set to 1 (profkit ncu sets it for the command it reruns): profile() records nothing and
# writes nothing, so the rerun neither overwrites the run it measures nor competes with ncu.
OFF_ENV = "PROFKIT_PROFILE_OFF"
CAPTURE_DIR = "capture-{k}-{stamp}"
MARK_PREFIX = "profkit/"


class Profile:
    """A capture context. Without a trigger it records from ``__enter__`` to ``__exit__``
    (the schedule decides which steps are traced). With a trigger it stays idle, and each
    time the trigger fires it records ``config.capture_steps`` steps into a new
    ``out_dir/capture-{k}-{timestamp}`` run directory."""

    def __init__(self, out_dir: str | os.PathLike, config: ProfileConfig, trigger: Any = None):
        self.out_dir, self.config = Path(out_dir), config
        self.trigger = make_trigger(trigger, config.trigger_every)
        self.session: CaptureSession | None = None
        self.captures: list[Path] = []
        self.step_num = 0
        self._active = False
        self._off = False
        self._term = TermHandler(self._on_term)

    # ---- context manager ---------------------------------------------------------------
    def __enter__(self) -> Profile:
        if self._active:
            raise CollectorError("profile() context entered twice; nest separate contexts")
        self._active, self.step_num = True, 0
        self._off = os.environ.get(OFF_ENV) == "1"
        if self._off:
            log.warning("profkit: %s=1: profile() records nothing in this process", OFF_ENV)
            return self
        try:
            if self.trigger is None:
                self.session = self._start_session(self.out_dir, self.config.repeat,
                                                   strict=self.config.strict)
                if self.session is not None:
                    self.captures.append(self.out_dir)
            else:
                if (isinstance(self.trigger, SignalTrigger) and self.config.trigger_every is None
                        and pdist.dist_ready()):
                    self.trigger.every = DEFAULT_EVERY  # bounds the agreement all-reduces
                self.trigger.install()
            self._term.install()
        except BaseException:
            self._active = False
            raise
        return self

    def _start_session(self, run_dir: Path, repeat: int,
                       strict: bool = False) -> CaptureSession | None:
        """A started capture into ``run_dir``; None when it cannot start (an unwritable
        folder, too little space, another job's capture there): a warning says why and the
        job goes on uncaptured, as it does when a write fails later. ``strict``: raise (a
        triggered capture, in the middle of the job, never does)."""
        try:
            return CaptureSession(run_dir, self.config, repeat=repeat).start()
        except (CollectorError, OSError) as exc:
            if strict:
                raise
            log.warning("profkit: no capture into %s (%s); the job goes on (strict=True "
                        "makes this an error)", run_dir, exc)
            return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if self._off:
            self._active = self._off = False
            return False
        try:
            self._finish(exc, summarize=True)
        finally:
            self._term.uninstall()
            if self.trigger is not None:
                self.trigger.close()
            self._active = False
        return False  # the user's exception propagates unchanged

    def _finish(self, exc: BaseException | None, error: dict[str, str] | None = None,
                summarize: bool = False) -> None:
        """Stop the current capture. ``summarize``: at ``__exit__`` (never in a signal
        handler), write the in-job report when the config asks for it (a rank whose capture
        failed only tells rank 0 so, see :mod:`~profkit.collectors.in_job.summarize`)."""
        session, self.session = self.session, None
        if session is not None:
            try:
                with self._term.held():  # a SIGTERM now would leave no status on disk
                    session.stop(exc, error)
                if summarize and self.config.summarize and self.trigger is None:
                    summarize_job(session)  # never raises
            finally:
                session.release_reserve()

    def _on_term(self, signum: int) -> None:
        log.warning("profkit: signal %s, saving the capture", signum)
        self._finish(None, signal_error(signum))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Use as a decorator: each call of ``fn`` runs inside this context."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper

    # ---- steps -------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training / inference step."""
        self.step_num += 1
        if self._off:
            return
        with self._term.held("in the profiler's step", warn=False):  # else the trace is lost
            if self.session is not None:
                self.session.step()
                if self.trigger is not None and self.session.steps >= self.config.capture_steps:
                    self._finish(None)
            elif self.trigger is not None and self._triggered():
                self._start_capture()

    def _triggered(self) -> bool:
        every = getattr(self.trigger, "every", 1)
        fired = self.trigger.poll(self.step_num)
        if pdist.dist_ready() and self.step_num % every == 0:
            # every rank checks at the same steps, so all take part in this all-reduce
            fired = pdist.any_rank(fired)
        return fired

    def _start_capture(self) -> None:
        k = len(self.captures)
        name = CAPTURE_DIR.format(k=k, stamp=time.strftime("%Y%m%dT%H%M%S"))
        name = pdist.broadcast_object(name)
        run_dir = self.out_dir / name
        log.info("profkit: trigger fired, capturing %d steps into %s",
                 self.config.capture_steps, run_dir)
        self.session = self._start_session(run_dir, 1)
        if self.session is not None:
            self.captures.append(run_dir)

    @property
    def run_dir(self) -> Path | None:
        """The directory of the current (or last) capture."""
        return self.captures[-1] if self.captures else None


# profile()'s keyword defaults are ProfileConfig's field defaults, read from one instance so
# that the two cannot drift apart.
_DEFAULT = ProfileConfig()


def profile(out_dir: str | os.PathLike | None = None, *, wait: int = _DEFAULT.wait,
            warmup: int = _DEFAULT.warmup, active: int = _DEFAULT.active,
            repeat: int = _DEFAULT.repeat, record_shapes: bool = _DEFAULT.record_shapes,
            profile_memory: bool = _DEFAULT.profile_memory,
            with_flops: bool = _DEFAULT.with_flops, with_stack: bool = _DEFAULT.with_stack,
            nvml: Any = _DEFAULT.nvml, nvml_hz: float = _DEFAULT.nvml_hz, trigger: Any = None,
            steps_on_trigger: int | None = _DEFAULT.steps_on_trigger,
            summarize: bool = _DEFAULT.summarize, strict: bool = _DEFAULT.strict,
            schedule: Callable[[int], Any] | None = None,
            **torch_profiler_kwargs: Any) -> Profile:
    """Profile a PyTorch job into the run directory ``out_dir`` (default
    ``$PROFKIT_RUN_DIR``). Call ``.step()`` once per step. See :class:`ProfileConfig` for
    the options (``strict=True``: a capture that cannot start raises, instead of
    a warning and a job that goes on uncaptured); extra keyword arguments named like its fields (``nvml_gpus``,
    ``nvml_chunk_s``, ``dcgm_url``, ``trigger_every``, ``min_free_bytes``) set them, the
    rest go to ``torch.profiler.profile``. As with ``torch.profiler.profile``,
    ``schedule=torch.profiler.schedule(...)`` may replace wait/warmup/active/repeat
    (see :func:`schedule_params`) and a user ``on_trace_ready`` is called after each
    trace is saved."""
    if schedule is not None:
        wait, warmup, active, repeat = schedule_params(schedule).values()
    if out_dir is None:
        out_dir = os.environ.get(RUN_DIR_ENV)
        if not out_dir:
            raise CollectorError(f"profile() needs out_dir (or {RUN_DIR_ENV} set)")
    extra = {k: torch_profiler_kwargs.pop(k) for k in _CONFIG_EXTRAS
             if k in torch_profiler_kwargs}
    if "nvml_gpus" in extra and extra["nvml_gpus"] is not None:
        extra["nvml_gpus"] = tuple(extra["nvml_gpus"])
    config = ProfileConfig(
        wait=wait, warmup=warmup, active=active, repeat=repeat, record_shapes=record_shapes,
        profile_memory=profile_memory, with_flops=with_flops, with_stack=with_stack,
        nvml=nvml, nvml_hz=nvml_hz, steps_on_trigger=steps_on_trigger, summarize=summarize,
        strict=strict, torch_profiler_kwargs=torch_profiler_kwargs, **extra)
    return Profile(out_dir, config, trigger)


_CONFIG_EXTRAS = ("nvml_gpus", "nvml_chunk_s", "dcgm_url", "trigger_every", "min_free_bytes")


@contextlib.contextmanager
def mark(name: str) -> Iterator[None]:
    """A named range ``profkit/{name}`` in the trace (e.g. ``prefill``, ``decode``)."""
    from torch.profiler import record_function

    with record_function(MARK_PREFIX + name):
        yield
