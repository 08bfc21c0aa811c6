"""User rules for classifying kernels, read from TOML without editing profkit.

A rules file (``profkit analyze --classify FILE``), or the same table under
``[tool.profkit.classify]`` in the pyproject.toml of the current project (the first one
found from the working directory upward)::

    [[rule]]
    pattern = "^my_a2a_kernel"    # Python regex, searched in the kernel name
    class = "communication"       # compute, communication, memcpy or memset
    subclass = "all_to_all"       # optional; else guessed from the name

    # in pyproject.toml: [[tool.profkit.classify.rule]] with the same keys

Rules are tried in order and the first match wins: the file's before the project's. A rule
beats every built-in pattern and every other piece of evidence (``profkit/classify/events.py``).
A rule with an unknown class or sub-class, a bad regex or an unknown key is a
:class:`~profkit.errors.UsageError` naming the file and the rule.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from profkit.errors import UsageError
from profkit.projectconf import find_pyproject, profkit_table, read_toml

log = logging.getLogger(__name__)
_KEYS = {"pattern", "class", "subclass"}


@dataclass(frozen=True)
class Rule:
    pattern: str
    cls: str
    subclass: str  # "" when the rule leaves it to the name


@dataclass(frozen=True)
class Rules:
    """Ordered rules (picklable: the map workers of profkit.analyzers.executor get them)."""

    rules: tuple[Rule, ...] = ()
    _compiled: list = field(default_factory=list, compare=False, repr=False)

    def match(self, name: str) -> Rule | None:
        """The first rule whose pattern is found in ``name``, else None."""
        if not self._compiled and self.rules:
            self._compiled.extend(re.compile(r.pattern) for r in self.rules)
        return next((r for r, rx in zip(self.rules, self._compiled) if rx.search(name)), None)

    @property
    def fingerprint(self) -> str:
        if not self.rules:
            return ""
        text = orjson.dumps([[r.pattern, r.cls, r.subclass] for r in self.rules])
        return hashlib.sha1(text).hexdigest()[:12]

    def __add__(self, other: Rules) -> Rules:
        return Rules(self.rules + other.rules)


def parse_rules(items: Any, source: str) -> Rules:
    """Validated rules from the TOML array of tables ``items``; ``source`` names the file."""
    from profkit.classify.patterns import SUBCLASSES

    if not isinstance(items, list):
        raise UsageError(f"{source}: expected [[rule]] tables with pattern and class")
    rules = []
    for i, item in enumerate(items, 1):
        where = f"{source}: rule {i}"
        if not isinstance(item, dict) or not isinstance(item.get("pattern"), str):
            raise UsageError(f"{where}: needs a pattern (a regular expression, as a string)")
        where += f" (pattern {item['pattern']!r})"
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown {'key' if len(unknown) == 1 else 'keys'} "
                             f"{', '.join(unknown)}; "
                             f"expected {', '.join(sorted(_KEYS))}")
        cls, sub = item.get("class"), item.get("subclass", "")
        if cls not in SUBCLASSES:
            raise UsageError(f"{where}: unknown class {cls!r}; expected one of "
                             f"{', '.join(SUBCLASSES)}")
        if sub and sub not in SUBCLASSES[cls]:
            raise UsageError(f"{where}: unknown {cls} subclass {sub!r}; expected one of "
                             f"{', '.join(SUBCLASSES[cls])}")
        try:
            re.compile(item["pattern"])
        except re.error as exc:
            raise UsageError(f"{where}: bad regular expression: {exc}") from None
        rules.append(Rule(item["pattern"], cls, sub))
    return Rules(tuple(rules))


def _read_toml(path: Path) -> dict:
    return read_toml(path, "the rules file", "classification rules")


def _project_table(doc: dict) -> Any:
    """``[tool.profkit.classify]``'s rule list, None when the document has no such table."""
    table = profkit_table(doc)
    table = table.get("classify") if isinstance(table, dict) else None
    return None if table is None else table.get("rule") if isinstance(table, dict) else table


def load_file(path: Path) -> Rules:
    """Rules of a rules file: top-level [[rule]] tables, or a pyproject.toml's
    [tool.profkit.classify] table."""
    doc = _read_toml(Path(path))
    items = doc["rule"] if "rule" in doc else _project_table(doc)
    return parse_rules(items, str(path))


def project_rules(start: Path) -> Rules:
    """Rules under [tool.profkit.classify] in the first pyproject.toml found from ``start``
    upward; none when that file has no such table."""
    path = find_pyproject(start)
    if path is None:
        return Rules()
    try:
        doc = _read_toml(path)
    except UsageError as exc:  # someone else's broken file: not profkit's to refuse
        log.warning("ignoring %s", exc)
        return Rules()
    items = _project_table(doc)
    return Rules() if items is None else parse_rules(items, f"{path} [tool.profkit.classify]")


def load_rules(path: Path | None, cwd: Path) -> Rules:
    """The rules in force for a command: ``path``'s (if given), then the project's."""
    own = load_file(path) if path is not None else Rules()
    return own + project_rules(cwd)


# --- the rules in force in this process (classify reads them) -------------------------------
_active: Rules | None = None  # None: not chosen yet, the current project's (read on first use)


def use_rules(rules: Rules | None) -> None:
    """Classify with these :class:`Rules` from now on in this process (None: the rules of
    the project found from the working directory, read on first use)."""
    global _active
    _active = rules


def active_rules() -> Rules:
    """The rules in force (see :func:`use_rules`)."""
    if _active is None:
        try:
            here = Path.cwd()
        except OSError:  # the working directory was removed: no project to read
            use_rules(Rules())
        else:
            use_rules(project_rules(here))
    return _active


def rules_fingerprint() -> str:
    """Short digest of the rules in force ("" without rules), for cache keys: tables
    classified under other rules are not reused."""
    return active_rules().fingerprint
