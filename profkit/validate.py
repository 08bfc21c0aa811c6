"""Validation at the boundary: values read from files profkit did not write (trace headers,
run.json, rank status files) become typed values once, here, with explicit fallbacks.

Nothing downstream then meets a string where an int belongs. Each reader collects what it
repaired or dropped in a :class:`Problems` list and reports it as ONE line naming the file
and the fields (:meth:`Problems.line`), never one line per value.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import Any

# Ranks and world sizes past this are not real jobs; also keeps rank * stride sums (merged
# pids and flow ids) inside int64.
MAX_RANKS = 1 << 20
# Epoch ns timestamps and base times must stay within +-2**62 (year 2116) and clock offsets
# within +-2**61, so that ts - offset and ts + dur never overflow int64.
MAX_ABS_NS = 1 << 62
MAX_OFFSET_NS = 1 << 61
MAX_SHOWN_CHARS = 40  # of a bad value, in a problem line
# Event names past this are cut (the longest real kernel names seen, C++ templates, have
# ~5,100 characters); a name of megabytes cost seconds in every regex that reads names.
MAX_NAME_CHARS = 8192


class Problems(list):
    """What was repaired or dropped while reading one file ("field value: what")."""

    def bad(self, field: str, value: Any, fallback: str) -> None:
        self.append(f"{field} {show(value)} {fallback}")

    def line(self, path: Any) -> str:
        """All problems of a file as one line ("" when there were none); a problem seen on
        many values is written once with its count."""
        counts = Counter(self)
        parts = [p if counts[p] == 1 else f"{p} (x{counts[p]})" for p in dict.fromkeys(self)]
        return f"{path}: {'; '.join(parts)}" if parts else ""


def cap_name(text: str) -> str:
    """``text`` when it has at most :data:`MAX_NAME_CHARS` characters, else its first
    MAX_NAME_CHARS, "…#" and 8 hex digits of a hash of the whole, so that two long names
    that differ after the cut stay two names."""
    if len(text) <= MAX_NAME_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{text[:MAX_NAME_CHARS]}\u2026#{digest}"


def show(value: Any) -> str:
    """A bad value, short enough for a log line."""
    text = repr(value) if not isinstance(value, (list, dict)) else type(value).__name__
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "..."


def int_in(value: Any, lo: int, hi: int) -> int | None:
    """``value`` as an int when it is an integral JSON number in [lo, hi], else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            return None
        value = int(value)
    if isinstance(value, int) and lo <= value <= hi:
        return value
    return None


def number(value: Any) -> float | None:
    """A finite JSON number as float, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def field_int(doc: dict, key: str, lo: int, hi: int, problems: Problems,
              label: str | None = None) -> int | None:
    """``doc[key]`` as an int in [lo, hi]; a present value that is not one is noted."""
    value = doc.get(key)
    out = int_in(value, lo, hi)
    if out is None and value is not None:
        problems.bad(label or key, value, f"is not an integer in [{_bound(lo)}, {_bound(hi)}] (ignored)")
    return out


def _bound(n: int) -> str:
    """A range bound for a message: large powers of two as 2**k (and 2**k-1)."""
    if n < 0:
        return "-" + _bound(-n)
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2**{n.bit_length() - 1}"
    if n + 1 >= 1 << 16 and (n + 1) & n == 0:
        return f"2**{n.bit_length()}-1"
    return str(n)


def field_text(doc: dict, key: str, problems: Problems, label: str | None = None) -> str | None:
    """``doc[key]`` when it is a string; a present value that is not one is noted."""
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    problems.bad(label or key, value, "is not text (ignored)")
    return None


def as_dict(value: Any, label: str, problems: Problems) -> dict:
    if value is None or isinstance(value, dict):
        return value or {}
    problems.bad(label, value, "is not an object (ignored)")
    return {}


def as_list(value: Any, label: str, problems: Problems) -> list:
    if value is None or isinstance(value, list):
        return value or []
    problems.bad(label, value, "is not a list (ignored)")
    return []


def scalars(doc: dict) -> dict:
    """The entries of ``doc`` whose values are JSON scalars (nested values dropped)."""
    return {k: v for k, v in doc.items() if isinstance(k, str)
            and (v is None or isinstance(v, (str, bool)) or number(v) is not None)}


def typed_record(doc: Any, label: str, ints: dict[str, tuple[int, int]], texts: tuple[str, ...],
                 problems: Problems) -> dict | None:
    """One object of a list or map (a GPU, a rank): its scalar entries, with ``ints`` and
    ``texts`` checked (a wrong-typed one is dropped and noted); None if it is no object."""
    if not isinstance(doc, dict):
        problems.bad(label, doc, "is not an object (ignored)")
        return None
    out = scalars(doc)
    for key, (lo, hi) in ints.items():
        if key in doc:
            out[key] = field_int(doc, key, lo, hi, problems, f"{label}.{key}")
    for key in texts:
        if key in doc:
            out[key] = field_text(doc, key, problems, f"{label}.{key}")
    return {k: v for k, v in out.items() if v is not None or doc.get(k) is None}
