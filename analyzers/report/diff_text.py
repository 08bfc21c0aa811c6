"""A :class:`~profkit.analyzers.compare.diff.Diff` as JSON (the ``profkit.diff`` contract),
text (a terminal) or Markdown (a pull request)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from profkit.analyzers.compare.diff import Diff
from profkit.analyzers.report.render import clean_json, markdown_table

DIFF_SCHEMA = "profkit.diff/2"
MAX_NAME_CHARS = 70


def diff_to_json(d: Diff) -> dict[str, Any]:
    verdict = {k: v for k, v in d.verdict.items() if k != "headline"}
    return clean_json({"schema": DIFF_SCHEMA, "base": d.base, "new": d.new, "verdict": verdict,
                       **{k: t.to_dict("records") for k, t in d.tables.items()}})


TITLES = {"diff_parts": "Where the step time changed (ms per step and rank, used steps)",
          "diff_kernel_groups": "Kernel groups that changed (ms per step and rank)",
          "diff_kernels": "GPU kernels that changed most (ms per step and rank)",
          "diff_ops": "CPU ops that changed most (self ms per step and rank)"}
PER_ITEM_TITLE = "; per {unit}: us"


def shown(name: str, table: pd.DataFrame) -> pd.DataFrame:
    """The rows and columns of a diff table a reader needs: rows whose change rounds to
    0.000 left out, the short kernel name in place of the full one, of the per-item times
    only the change, calls per step as ``base -> new``."""
    deltas = [c for c in table.columns if c.startswith("delta_")]
    table = table[(table[deltas].round(3) != 0).any(axis=1)].copy()
    table = table.drop(columns=[c for c in table.columns
                                if c.startswith(("base_us_per_", "new_us_per_"))])
    if "short_name" in table:
        table = table.drop(columns=["name"]).rename(columns={"short_name": "kernel"})
    label = table.columns[0]
    table[label] = table[label].astype(str).str.slice(0, MAX_NAME_CHARS)
    if "base_calls" in table:
        table["calls"] = [f"{b:g} -> {n:g}" for b, n in
                          zip(table.pop("base_calls").round(1), table.pop("new_calls").round(1))]
    return table


def _title(name: str, d: Diff) -> str:
    unit = d.verdict.get("basis", "step")
    return TITLES[name] + ("" if unit == "step" else PER_ITEM_TITLE.format(unit=unit))


def _list(lines: list[str], title: str, items: list[str], markdown: bool) -> None:
    if items:
        lines += ["", f"**{title}**" if markdown else title]
        lines += [f"- {c}" for c in items]


def _head_lines(d: Diff, markdown: bool) -> list[str]:
    v = d.verdict
    lines = [f"{'**Verdict:** ' if markdown else 'VERDICT: '}{v['headline']}"]
    lines += [f"{'> **Warning:** ' if markdown else 'WARNING: '}{w}" for w in v["warnings"]]
    nature = v.get("nature", [])
    _list(lines, "What changed:", nature, markdown)
    _list(lines, "Also changed:", [c for c in v["changes"] if c not in nature], markdown)
    return lines


MEMORY_TITLE = "Peak memory per rank (GB; the allocator's, over the used steps)"


def memory_lines(d: Diff, markdown: bool) -> list[str]:
    """The change of peak memory beside the change of time (``verdict['memory']``), and
    per rank and device when there are several; nothing when a side has no memory events."""
    mem = d.verdict.get("memory")
    if not mem:
        return []
    lines = ["", f"**Memory:** {mem['text']}" if markdown else f"MEMORY: {mem['text']}"]
    table = pd.DataFrame(mem.get("ranks") or [])
    if len(table) > 1:
        table = table.rename(columns=lambda c: c.replace("_gb", "").replace("_frac", ""))
        lines += ["", f"### {MEMORY_TITLE}" if markdown else MEMORY_TITLE + ":"]
        lines += (markdown_table(table.round(3)) if markdown
                  else [table.to_string(index=False, float_format=lambda v: f"{v:.3f}")])
    return lines


def diff_to_text(d: Diff, markdown: bool = False) -> str:
    head = f"profkit diff: {d.base} -> {d.new}"
    lines = [f"## {head}" if markdown else head, "", *_head_lines(d, markdown),
             *memory_lines(d, markdown), ""]
    for name in TITLES:
        table = d.tables.get(name)
        if table is None or table.empty:
            continue
        table = shown(name, table)
        lines += [f"### {_title(name, d)}" if markdown else _title(name, d) + ":"]
        lines += (markdown_table(table) if markdown
                  else [table.to_string(index=False, float_format=lambda v: f"{v:.3f}")]) + [""]
    return "\n".join(lines) + "\n"
