"""Python strings, not Arrow strings, in the frames an analysis builds.

pandas 3 infers its Arrow-backed ``str`` dtype for every sequence of strings it is given,
column labels included. An analysis builds thousands of small frames and columns, and
converting each label list and name column to Arrow and back cost about a quarter of the
CPU of analysing a small run (``bench/small_runs.py``), for the same values: every JSON
report and table of the bundled, public and corpus runs was byte-identical either way when
this was written. So the reading and analysing entry points run inside
:func:`python_strings`, which turns pandas' ``future.infer_string`` off while at least one
of them runs in this process and puts the caller's setting back when the last one returns
(a count under a lock, so that analyses in several threads, as in the dashboard, nest).
Frames made meanwhile in other threads hold the same values with ``object`` dtype; tables
read back from Arrow (caches, a pool's results) keep pandas' ``str``. Where pandas no
longer has the option (pandas 4), this does nothing.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import pandas as pd

OPTION = "future.infer_string"
_lock = threading.Lock()
_depth = 0
_saved: bool | None = None  # the caller's setting, while _depth > 0
F = TypeVar("F", bound=Callable)


def _set(value: bool) -> None:
    with warnings.catch_warnings():  # the option is deprecated in pandas 3
        warnings.simplefilter("ignore")
        pd.set_option(OPTION, value)


def _get() -> bool | None:
    """The option's value, None where this pandas has no such option."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(pd.get_option(OPTION))
    except (KeyError, pd.errors.OptionError):
        return None


@contextmanager
def python_strings() -> Iterator[None]:
    """Frames built inside hold strings as Python objects (see the module docstring)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = _get()
            if _saved:
                _set(False)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved:
                _set(True)


def with_python_strings(fn: F) -> F:
    """``fn`` run inside :func:`python_strings`."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with python_strings():
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
