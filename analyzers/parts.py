"""The step parts: every instant of a step is charged to exactly one of them
(``measure/charge.py``). This table is the one place a part is declared; the charged-time
model's columns, the verdict's wording, the findings' wording, thresholds and advice, the
savings, the report's colours and the dashboard's (CSS variables included) all read it.
Adding a part is one row here, its charging rule and its advice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """One part of a step.

    key: the column of the step tables and the key of the JSON report (``memcpy``).
    label: how it reads in headers, charts and legends (``transfer``).
    name: how it reads in a sentence of the report, with its explanation where it needs one
      (``held work (queued, waiting on a stream or event)``).
    finding: how a finding on it says what the time is (``memory transfer``).
    color: its colour in every chart, and the dashboard's CSS variable ``--<key>``.
    host_side: the host starves the GPU (launch overhead, host work): the verdict counts the
      host-side parts together.
    cited: the table a finding on it points at (the dashboard's Tables page).
    """

    key: str
    label: str
    name: str
    finding: str
    color: str
    host_side: bool = False
    cited: str = ""


PART_TABLE: tuple[Part, ...] = (
    Part("compute", "compute", "compute", "compute", "#2563eb", cited="compute_subclasses"),
    Part("communication", "communication", "communication", "communication", "#f59e0b",
         cited="collectives"),
    Part("memcpy", "transfer", "transfer", "memory transfer", "#10b981", cited="transfers"),
    Part("cpu_launch", "launch overhead", "launch overhead", "launch overhead", "#8b5cf6",
         host_side=True, cited="launches"),
    Part("host_work", "host work", "host work", "host work", "#be185d", host_side=True,
         cited="launches"),
    Part("data_loading", "data loading", "data loading", "data loading", "#a16207",
         cited="idle_code"),
    Part("host_sync", "host sync", "host sync", "host sync", "#dc2626", cited="idle_code"),
    Part("idle_other", "held work", "held work (queued, waiting on a stream or event)",
         "held work", "#9ca3af", cited="stream_breakdown"),
)

BY_KEY: dict[str, Part] = {p.key: p for p in PART_TABLE}
PARTS: tuple[str, ...] = tuple(p.key for p in PART_TABLE)
HOST_SIDE: tuple[str, ...] = tuple(p.key for p in PART_TABLE if p.host_side)
PART_COLORS: dict[str, str] = {p.key: p.color for p in PART_TABLE}


def part_name(part: str) -> str:
    """How a part reads in a sentence: ``memcpy`` is ``transfer``; any other text as it is."""
    found = BY_KEY.get(part)
    return found.name if found else part


def part_label(part: str) -> str:
    """How a part reads in a header or a legend: ``held work``."""
    found = BY_KEY.get(part)
    return found.label if found else part.split(" (")[0]
