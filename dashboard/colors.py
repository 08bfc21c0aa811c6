"""Every colour the app gives a thing, in one place: the step parts' (declared with the parts
in :data:`profkit.analyzers.parts.PART_TABLE`), the GPU classes' and the CPU event kinds'.

The pages' stylesheet gets the parts' colours as CSS variables (``--compute``, ...) from
:func:`part_css`, so a part added to the table has its colour in the charts and the CSS
without an edit here.
"""

from __future__ import annotations

from profkit.analyzers import parts

PART_COLORS: dict[str, str] = dict(parts.PART_COLORS)  # in PART_TABLE order: legends follow it
CLASS_COLORS = {**PART_COLORS, "memset": "#db2777"}  # far from memcpy's green
CPU_KIND_COLORS = {"cpu_op": "#64748b", "runtime": "#8b5cf6", "driver": "#a78bfa",
                   "annotation": "#cbd5e1", "python": "#94a3b8", "sync": "#dc2626",
                   "other": "#e2e8f0", "gpu_annotation": "#cbd5e1"}
STRAGGLER_COLOR = "#dc2626"


def part_css() -> str:
    """A ``:root`` rule declaring ``--<part key>: <colour>`` for every row of the parts
    table, read when called (the app builds it once, at its creation)."""
    pairs = " ".join(f"--{p.key}: {p.color};" for p in parts.PART_TABLE)
    return f":root {{ {pairs} }}"
