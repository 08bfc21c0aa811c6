"""Numbers as a reader wants them: ns as ms, fractions as %, bytes as MB / GB, bandwidth in
GB/s. Pure formatting; the JSON report keeps the raw values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from profkit.textout import plural

MISSING = "-"


def clip(text: Any, limit: int) -> str:
    """One line of at most ``limit`` characters (whitespace runs as one space)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def finite(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, not a number or not finite."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def ms(value_ms: Any, per: str = "") -> str:
    """``1.47 ms`` (``per="step"``: ``1.47 ms/step``), 3 significant digits; below 0.1 ms in us."""
    v = finite(value_ms)
    if v is None:
        return MISSING
    unit = "ms"
    if 0 < abs(v) < 0.1:  # launch times and short gaps read in microseconds
        v, unit = v * 1e3, "us"
    text = f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"
    return f"{text} {unit}" + (f"/{per}" if per else "")


def ms_range(lo_ns: Any, hi_ns: Any) -> str:
    """``0.958 to 6.02 ms``; ``95.1 us to 0.2 ms`` when the two need other units."""
    lo, hi = ms_of_ns(lo_ns), ms_of_ns(hi_ns)
    lo_value, _, lo_unit = lo.partition(" ")
    return f"{lo_value if lo_unit == hi.partition(' ')[2] else lo} to {hi}"


def ms_of_ns(value_ns: Any, per: str = "") -> str:
    v = finite(value_ns)
    return ms(None if v is None else v / 1e6, per)


def pct(frac: Any) -> str:
    """``14.1%`` below 10% and above 90% keep a decimal, else whole percents."""
    v = finite(frac)
    if v is None:
        return MISSING
    p = 100 * v
    if 0 < abs(p) < 0.05:
        return "<0.1%"
    return f"{p:.1f}%" if abs(p) < 10 or 90 < abs(p) < 100 else f"{p:.0f}%"


def size(nbytes: Any) -> str:
    """``33.6 MB``: decimal units, as bandwidths in GB/s are."""
    v = finite(nbytes)
    if v is None:
        return MISSING
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} B"


def gbps(value: Any) -> str:
    v = finite(value)
    return MISSING if v is None else f"{v:.3g} GB/s" if abs(v) < 100 else f"{v:.0f} GB/s"


def tflops(value: Any) -> str:
    v = finite(value)
    if v is None:
        return MISSING
    if 0 < abs(v) < 0.1:
        return f"{v * 1e3:.3g} GFLOP/s"
    return f"{v:.3g} TFLOP/s" if abs(v) < 100 else f"{v:.0f} TFLOP/s"


def count(value: Any) -> str:
    """A count, ``-`` where unknown (missing or negative: -1 marks an unknown group size)."""
    v = finite(value)
    return MISSING if v is None or v < 0 else number(value)


def number(value: Any) -> str:
    """An int as is, a float to 3 significant digits."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    v = finite(value)
    if v is None:
        return MISSING if value is None or isinstance(value, float) else str(value)
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else f"{v:.3g}"


# Key endings and how their values read (first match wins): the analyzers put the unit
# into every key's name.
_BY_SUFFIX = (
    ("_ns_per_step", lambda v: ms_of_ns(v, "step")), ("ms_per_step", lambda v: ms(v, "step")),
    ("_ns", ms_of_ns), ("_ms", ms), ("_us", lambda v: f"{number(v)} us"),
    ("_frac", pct), ("fraction", pct), ("_share", pct), ("share", pct), ("_util", pct),
    ("mfu", pct), ("flop_coverage", pct), ("_pct", lambda v: f"{number(v)}%"),
    ("bytes", size), ("_gbps", gbps), ("_tflops", tflops), ("_mhz", lambda v: f"{number(v)} MHz"),
    ("_w", lambda v: f"{number(v)} W"), ("_j_per_step", lambda v: f"{number(v)} J/step"),
)


def by_key(key: str, value: Any) -> str:
    """A value read by its key's unit suffix (``others_wait_ns_per_step`` -> ms/step,
    ``wait_frac`` -> %, ``peak_mem_bytes`` -> GB); other values as plain numbers or text."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        return plural(len(value), "item")
    for suffix, fmt in _BY_SUFFIX:
        if key.endswith(suffix):
            return fmt(value)
    return number(value)
