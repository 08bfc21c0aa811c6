"""A :class:`~profkit.analyzers.compare.diff.Diff` as JSON (the ``profkit.diff`` contract),
text (a terminal) or Markdown (a pull request)."""

from __future__ import annotations

from typing import Any

from profkit.analyzers.compare.diff import Diff
from profkit.analyzers.report.render import clean_json, markdown_table

DIFF_SCHEMA = "profkit.diff/2"


def diff_to_json(d: Diff) -> dict[str, Any]:
    verdict = {k: v for k, v in d.verdict.items() if k != "headline"}
    return clean_json({"schema": DIFF_SCHEMA, "base": d.base, "new": d.new, "verdict": verdict,
                       **{k: t.to_dict("records") for k, t in d.tables.items()}})


TITLES = {"diff_parts": "Where the step time changed (ms per step and rank, used steps)",
          "diff_kernels": "GPU ops that changed most (ms per step and rank)",
          "diff_ops": "CPU ops that changed most (self ms per step and rank)"}


def _head_lines(d: Diff, markdown: bool) -> list[str]:
    v = d.verdict
    lines = [f"{'**Verdict:** ' if markdown else 'VERDICT: '}{v['headline']}"]
    lines += [f"{'> **Warning:** ' if markdown else 'WARNING: '}{w}" for w in v["warnings"]]
    if v["changes"]:
        lines += ["", "Also changed:" if not markdown else "**Also changed:**"]
        lines += [f"- {c}" for c in v["changes"]]
    return lines


def diff_to_text(d: Diff, markdown: bool = False) -> str:
    head = f"profkit diff: {d.base} -> {d.new}"
    lines = [f"## {head}" if markdown else head, "", *_head_lines(d, markdown), ""]
    for name, title in TITLES.items():
        table = d.tables.get(name)
        if table is None or table.empty:
            continue
        table = table.copy()
        table[table.columns[0]] = table[table.columns[0]].astype(str).str.slice(0, 70)
        lines += [f"### {title}" if markdown else title + ":"]
        lines += (markdown_table(table) if markdown
                  else [table.to_string(index=False, float_format=lambda v: f"{v:.3f}")]) + [""]
    return "\n".join(lines) + "\n"
