"""The project's own settings for profkit: TOML files the user names, and the
``[tool.profkit]`` table of the pyproject.toml found from the working directory upward.

Shared by the kernel classification rules (``[tool.profkit.classify]``,
:mod:`profkit.classify.rules`) and the analysis thresholds (``[tool.profkit]``,
``profkit.analyzers.config``), so that both find the same file the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from profkit.errors import UsageError

PYPROJECT = "pyproject.toml"


def toml_parser():
    """The TOML parser: the standard library's ``tomllib`` (Python 3.11+), else the
    ``tomli`` package it came from (a dependency on Python 3.10); None when neither is
    there."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            return None
    return tomllib


def read_toml(path: Path, what: str, purpose: str) -> dict:
    """The TOML document at ``path``; a :class:`UsageError` naming the file when it cannot
    be read or parsed. ``what`` names the file in messages ("the rules file"), ``purpose``
    what needs it ("classification rules", when no TOML parser is installed)."""
    tomllib = toml_parser()
    if tomllib is None:
        raise UsageError(f"{path}: {purpose} need a TOML parser: Python 3.11 or newer, or "
                         "pip install tomli")
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


def find_pyproject(start: Path) -> Path | None:
    """The first pyproject.toml in ``start`` or a folder above it (None when there is none):
    the project the command runs in."""
    for folder in (start, *start.parents):
        path = folder / PYPROJECT
        if path.is_file():
            return path
    return None


def profkit_table(doc: dict) -> Any:
    """``[tool.profkit]`` of a pyproject document (None when absent)."""
    tool = doc.get("tool")
    return tool.get("profkit") if isinstance(tool, dict) else None


def working_dir() -> Path | None:
    """The working directory, None when it was removed (then there is no project to read)."""
    try:
        return Path.cwd()
    except OSError:
        return None
