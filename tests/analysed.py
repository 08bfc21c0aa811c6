"""Analyses of the runs no test changes (the bundled samples, tests/data, the shared corpus),
made once per test process and handed to each test as its own deep copy.

Dozens of tests read the same few real runs: each analysed them again (seconds apiece on a
small machine). Here a run is read or analysed once per set of arguments and per state of
its files (the key holds the fingerprint of every file of the run, so a run that did
change is read again); anything outside those folders (a test's own copies) is always done
afresh. A test gets a deep copy, so what one test does to its result never reaches another.
Tests of the analysis itself (the executor against the in-process path, the caches) call
profkit directly.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profkit.run import cache
from tests.conftest import REPO, SHARED

READ_ONLY = tuple(p.resolve() for p in (REPO / "samples", REPO / "tests" / "data", SHARED))
_MADE: dict[tuple, Any] = {}


def _once(kind: str, make: Callable[[], Any], path: Path, options: dict) -> Any:
    real = Path(path).resolve()
    if not any(real.is_relative_to(root) for root in READ_ONLY):
        return make()
    key = (kind, str(path), cache.run_fingerprint(real), repr(sorted(options.items())))
    if key not in _MADE:
        _MADE[key] = make()
    return copy.deepcopy(_MADE[key])


def analysed(path: Path, **options) -> Any:
    """``analyze_run(path, cache=False, workers=1, **options)``."""
    from profkit.analyzers.executor import analyze_run

    options = {"cache": False, "workers": 1, **options}
    return _once("analyze_run", lambda: analyze_run(path, **options), path, options)


def loaded(path: Path, **options) -> Any:
    """``load_run(path, cache=False, **options)``."""
    from profkit.run.loader import load_run

    options = {"cache": False, **options}
    return _once("load_run", lambda: load_run(path, **options), path, options)


def analysed_whole(path: Path, **options) -> Any:
    """``analyze(load_run(path, cache=False, **options))``: the run read whole in this
    process, then analysed (the path ``profkit.analyze`` takes); the reading is
    :func:`loaded`'s, shared with the tests that only read the run."""
    from profkit.analyzers.analyze import analyze

    options = {"cache": False, **options}
    return _once("analyze(load_run)", lambda: analyze(loaded(path, **options)), path, options)
