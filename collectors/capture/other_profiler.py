"""Is a torch profiler already running in this process?

Kineto keeps one profiling session per process. A second profiler started beside a running
one (a ``profile()`` inside another, or inside a user's own ``torch.profiler.profile``, as
Lightning's and Hugging Face's profilers run) corrupts that session: the process dies with
SIGSEGV when the outer profiler exports its trace, on CPU as on GPUs. profkit therefore never
starts a second one: :func:`other_profiler` says why not, and the session captures what is
safe without it (the NVML sampler, run.json).
"""

from __future__ import annotations

import gc
import inspect
import logging
import threading
import weakref
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

# profkit sessions of this process whose torch profiler is started (its wait phase included:
# the autograd profiler is not enabled then, yet its later cycles would meet ours)
_started: set[int] = set()
_lock = threading.Lock()
# the torch profilers profkit made: never "another profiler", started or stopped (on a torch
# whose stop() leaves their step range set, a stopped one looks started)
_ours: weakref.WeakSet = weakref.WeakSet()


def mark_started(owner: object, torch_profiler: object | None = None) -> None:
    """``owner`` (a capture session) has started its torch profiler ``torch_profiler``."""
    with _lock:
        _started.add(id(owner))
        if torch_profiler is not None:
            _ours.add(torch_profiler)


def mark_stopped(owner: object) -> None:
    """``owner``'s torch profiler is stopped."""
    with _lock:
        _started.discard(id(owner))


def other_profiler() -> str | None:
    """Why a torch profiler may not be started now (another one is running in this
    process), or None when none is."""
    with _lock:
        if _started:
            return "another profkit profile() is capturing in this process"
    if recording_now():
        return "a torch profiler is recording in this process (torch.profiler.profile)"
    if _started_torch_profiler():
        return ("a torch.profiler.profile is started in this process (in its wait or "
                "warmup steps)")
    return None


def recording_now() -> bool:
    """Whether the autograd (Kineto) profiler is enabled in this process: a profiler is
    recording (or warming up with events enabled). A cheap C call, asked at every step."""
    try:
        from torch._C import _autograd

        return bool(_autograd._profiler_enabled())
    except (ImportError, AttributeError):  # a torch without it: rely on the other checks
        return False


def _started_torch_profiler() -> bool:
    """Whether a ``torch.profiler.profile`` object is between ``start()`` and ``stop()``.
    A scheduled profiler in its wait or warmup steps has not enabled the autograd profiler
    yet; its step range (``step_rec_fn``, set by ``start()``, cleared by ``stop()``) is the
    one sign of it. Found among the live objects: one pass at the start of a capture."""
    try:
        # the class where torch defines it: a test or a tool may replace the package's name
        from torch.profiler.profiler import profile as torch_profile
    except ImportError:
        return False
    if not isinstance(torch_profile, type):
        return False
    kinds = _subclasses(torch_profile)
    stopped_clears = _stop_clears_step_range(torch_profile)
    # type(), not isinstance(): isinstance asks a lazy module's __getattr__ for __class__
    return any(type(obj) in kinds and obj not in _ours
               and _between_start_and_stop(obj, stopped_clears)
               for obj in gc.get_objects())


@cache
def _stop_clears_step_range(torch_profile: type) -> bool:
    """Whether this torch's ``profile.stop()`` clears the step range (torch 2.13 does;
    2.11 exits it and leaves it set, so there a stopped profiler looks started)."""
    try:
        return "step_rec_fn = None" in inspect.getsource(torch_profile.stop)
    except (OSError, TypeError):
        return False


def _step_tracker_holds_profiler_steps() -> bool:
    """Whether a ``torch.profiler.profile`` made and not yet left (its ``__exit__`` erases
    its step count from Kineto's step tracker) is counting steps in this process."""
    try:
        from torch.autograd.profiler import KinetoStepTracker
        from torch.profiler.profiler import PROFILER_STEP_NAME
    except ImportError:
        return True  # no way to tell: keep the step range's word
    return PROFILER_STEP_NAME in getattr(KinetoStepTracker, "_step_dict", {PROFILER_STEP_NAME: 0})


def _subclasses(cls: type) -> set[type]:
    """``cls`` and every subclass of it defined so far."""
    out, todo = set(), [cls]
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo.extend(c.__subclasses__())
    return out


def _between_start_and_stop(prof: Any, stop_clears: bool = True) -> bool:
    """A set step range means started, where ``stop()`` clears it; elsewhere only while a
    profiler that was not left counts steps (a user's ``with`` block that ended is left)."""
    try:
        started = getattr(prof, "step_rec_fn", None) is not None
    except Exception:  # noqa: BLE001 - a half-built object: not a running profiler
        return False
    return started and (stop_clears or _step_tracker_holds_profiler_steps())
