"""Thresholds without editing installed code: ``--config FILE`` (TOML) and the
``[tool.profkit]`` table of the project's pyproject.toml.

Any field of :class:`~profkit.analyzers.thresholds.Thresholds` may be set::

    # profkit.toml (profkit analyze RUN --config profkit.toml)
    data_loading_frac = 0.10
    step_outlier_frac = 0.40

    # pyproject.toml
    [tool.profkit]
    diff_min_change_frac = 0.05

The layers, each overriding the one before: the defaults, the pyproject.toml found from the
working directory upward (the same file ``[tool.profkit.classify]`` is read from), the
``--config`` file, then explicit command-line options (``--flops-per-step``, ...). An unknown
name, a value of the wrong type or out of range is a :class:`UsageError` naming the file and
the key.
"""

from __future__ import annotations

import difflib
import hashlib
import logging
import math
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import orjson
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.errors import UsageError
from profkit.projectconf import find_pyproject, profkit_table, read_toml

log = logging.getLogger(__name__)
# [tool.profkit] sub-tables that are not thresholds: read by their own modules
OTHER_TABLES = {"classify": "kernel classification rules (profkit/classify/rules.py)"}
# Fields whose valid range is narrower than "a number >= 0"
OPEN_UNIT = {"diff_confidence"}  # 0 < value < 1
POSITIVE = {"flops_per_step", "peak_tflops"}  # value > 0
TYPES = {f.name: str(f.type) for f in fields(Thresholds)}


def _problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be threshold ``name`` (None when it can)."""
    whole = TYPES[name] == "int"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (whole and not isinstance(value, int)):
        kind = "a whole number" if whole else "a number"
        return f"expected {kind}, got {value!r} ({type(value).__name__})"
    if not math.isfinite(value) or value < 0:
        return f"expected a finite number >= 0, got {value!r}"
    if name in OPEN_UNIT and not 0 < value < 1:
        return f"expected a number between 0 and 1, got {value!r}"
    if name in POSITIVE and value <= 0:
        return f"expected a number > 0, got {value!r}"
    return None


def _unknown(name: str, source: str) -> UsageError:
    if name in OTHER_TABLES:
        return UsageError(f"{source}: {name} is not a threshold: {OTHER_TABLES[name]} are "
                          "read from --classify FILE or [tool.profkit.classify]")
    close = difflib.get_close_matches(name, TYPES, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return UsageError(f"{source}: unknown threshold {name!r}; {hint}"
                      f"known names: {', '.join(TYPES)}")


def thresholds_from(table: Any, source: str, base: Thresholds = DEFAULT,
                    skip: frozenset[str] = frozenset()) -> Thresholds:
    """``base`` with the fields that ``table`` (a TOML table) sets; ``source`` names the
    file in errors, ``skip`` the sub-tables that other modules read."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: expected a table of threshold names and values")
    changes = {}
    for name, value in table.items():
        if name in skip:
            continue
        if name not in TYPES:
            raise _unknown(name, source)
        problem = _problem(name, value)
        if problem:
            raise UsageError(f"{source}: {name}: {problem}")
        changes[name] = float(value) if TYPES[name] != "int" else value
    return replace(base, **changes)


def project_thresholds(start: Path | None, base: Thresholds = DEFAULT) -> Thresholds:
    """``base`` with [tool.profkit] of the first pyproject.toml from ``start`` upward. A
    file that is not TOML is someone else's to fix: warned about and skipped."""
    path = find_pyproject(start) if start is not None else None
    if path is None:
        return base
    try:
        doc = read_toml(path, "the project file", "thresholds in pyproject.toml")
    except UsageError as exc:
        log.warning("ignoring %s", exc)
        return base
    table = profkit_table(doc)
    if table is None:
        return base
    return thresholds_from(table, f"{path} [tool.profkit]", base, frozenset(OTHER_TABLES))


def file_thresholds(path: Path, base: Thresholds = DEFAULT) -> Thresholds:
    """``base`` with the thresholds of a ``--config`` file: top-level names, or the
    [tool.profkit] table when the file is a pyproject.toml."""
    doc = read_toml(Path(path), "the config file", "config files")
    table = profkit_table(doc) if "tool" in doc else doc
    skip = frozenset(OTHER_TABLES) if table is not doc else frozenset()
    return thresholds_from(table if table is not None else {}, str(path), base, skip)


def load_thresholds(config: Path | None, start: Path | None) -> Thresholds:
    """The thresholds in force: defaults, then the project's pyproject.toml (found from
    ``start``), then the ``config`` file."""
    th = project_thresholds(start)
    return file_thresholds(config, th) if config is not None else th


def thresholds_key(th: Thresholds) -> str:
    """A short stable digest of every field, for cache keys."""
    text = orjson.dumps(asdict(th), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha1(text).hexdigest()[:16]
