"""One profkit capture driven by a trainer's hooks, shared by the framework callbacks:
started when training starts, stepped once per optimizer step, ended when training ends,
raises, or the interpreter exits without the trainer's end hook."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from pathlib import Path
from typing import Any

from profkit.collectors.profile import RUN_DIR_ENV, Profile, profile

log = logging.getLogger(__name__)

RUN_SUBDIR = "profkit"  # under the trainer's output folder when no run directory is given


class TrainerCapture:
    """``run_dir`` (else ``$PROFKIT_RUN_DIR``, else ``<trainer output>/profkit``) and the
    keyword arguments of :func:`profkit.profile` (wait/warmup/active/repeat, schedule,
    nvml, ...). Every rank of a distributed job writes its own trace into the same run
    directory, as ``profile()`` does under torchrun."""

    def __init__(self, run_dir: str | os.PathLike | None, profile_kwargs: dict[str, Any]):
        self.run_dir = run_dir
        self.profile_kwargs = profile_kwargs
        self.prof: Profile | None = None
        self.dir: Path | None = None
        self.finished = False

    def resolve_dir(self, trainer_output: str | os.PathLike | None) -> Path:
        chosen = self.run_dir or os.environ.get(RUN_DIR_ENV)
        if chosen:
            return Path(chosen)
        return Path(trainer_output or ".") / RUN_SUBDIR

    def start(self, trainer_output: str | os.PathLike | None) -> None:
        if self.prof is not None or self.finished:
            log.warning("profkit: this callback has already captured a run; create a new one "
                        "for another training run")
            return
        self.dir = self.resolve_dir(trainer_output)
        prof = profile(self.dir, **self.profile_kwargs)
        prof.__enter__()
        self.prof = prof
        atexit.register(self._at_exit)

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()

    def stop(self, exc: BaseException | None = None) -> None:
        """End the capture; ``exc`` marks it failed with that error."""
        prof, self.prof = self.prof, None
        if prof is None:
            return
        self.finished = True
        atexit.unregister(self._at_exit)
        prof.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

    def _at_exit(self) -> None:
        # Trainer.train() raised (the HF Trainer has no exception hook): the uncaught
        # exception is in sys.last_value by the time atexit runs.
        exc = getattr(sys, "last_value", None) or RuntimeError(
            "the process exited before the trainer's train-end hook ran")
        self.stop(exc)
