"""A :class:`~profkit.analyzers.compare.diff.Diff` as JSON (the ``profkit.diff`` contract),
text (a terminal) or Markdown (a pull request)."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
from profkit.analyzers.compare.diff import Diff
from profkit.analyzers.report.diff_display import attribution_cells, markdown_lines, memory_cells
from profkit.analyzers.report.render import clean_json

from profkit.textout import PIPE_WIDTH, glue, table_lines, wrap

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
PER_ITEM_TITLE = "; the change per {unit} in us"


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


_BEFORE_AFTER = re.compile(r"(?<=\d) -> (?=[\d+-])")  # "21.802 -> 19.041" stays on one line


def _para(text: str, width: int, first: str) -> list[str]:
    """``first + text`` wrapped at ``width``, a number's ``before -> after`` kept whole."""
    return wrap(_BEFORE_AFTER.sub(glue(" -> "), text), width, first, "  ")


def _list(lines: list[str], title: str, items: list[str], markdown: bool, width: int) -> None:
    if items:
        lines += ["", f"**{title}**" if markdown else title]
        lines += [f"- {c}" for c in items] if markdown else \
            [x for c in items for x in _para(c, width, "- ")]


def _head_lines(d: Diff, markdown: bool, width: int) -> list[str]:
    v = d.verdict
    if markdown:
        lines = [f"**Verdict:** {v['headline']}"]
        lines += [f"> **Warning:** {w}" for w in v["warnings"]]
    else:
        lines = _para(v["headline"], width, "VERDICT: ")
        lines += [x for w in v["warnings"] for x in _para(w, width, "WARNING: ")]
    nature = v.get("nature", [])
    _list(lines, "What changed:", nature, markdown, width)
    _list(lines, "Also changed:", [c for c in v["changes"] if c not in nature], markdown, width)
    return lines


MEMORY_TITLE = "Peak memory per rank (GB; the allocator's, over the used steps)"


def _table(headers: list[str], rows: list[list[str]], markdown: bool, width: int) -> list[str]:
    if markdown:
        return markdown_lines(headers, rows)
    # the attribution's first column is a name (cut to fit); the memory table's the rank
    return table_lines(headers, rows, width, clip=[] if headers[0] == "rank" else [0])


def memory_lines(d: Diff, markdown: bool, width: int = PIPE_WIDTH) -> list[str]:
    """The change of peak memory beside the change of time (``verdict['memory']``), and
    per rank and device when there are several; nothing when a side has no memory events."""
    mem = d.verdict.get("memory")
    if not mem:
        return []
    lines = ["", f"**Memory:** {mem['text']}"] if markdown else \
        ["", *_para(mem["text"], width, "MEMORY: ")]
    table = pd.DataFrame(mem.get("ranks") or [])
    if len(table) > 1:
        lines += ["", f"### {MEMORY_TITLE}"] if markdown else ["", *wrap(MEMORY_TITLE + ":", width)]
        lines += _table(*memory_cells(table), markdown, width)
    return lines


def phase_lines(d: Diff, markdown: bool, width: int = PIPE_WIDTH) -> list[str]:
    """The change by inference phase (``verdict['phases']``); nothing without phases."""
    ph = d.verdict.get("phases")
    if not ph:
        return []
    return ["", f"**Inference:** {ph['text']}"] if markdown else \
        ["", *_para(ph["text"], width, "INFERENCE: ")]


def diff_to_text(d: Diff, markdown: bool = False, width: int = PIPE_WIDTH) -> str:
    """The diff for a terminal of ``width`` columns (prose wrapped at spaces, tables laid
    out as ``analyze`` lays out its own: :mod:`profkit.textout`), or as Markdown for a pull
    request; parts by their labels, times and shares as :mod:`.diff_display` writes them."""
    head = f"profkit diff: {d.base} -> {d.new}"
    title = [f"## {head}"] if markdown else \
        wrap(f"{glue(str(d.base))} -> {glue(str(d.new))}", width, "profkit diff: ", "  ")
    lines = [*title, "", *_head_lines(d, markdown, width),
             *memory_lines(d, markdown, width), *phase_lines(d, markdown, width), ""]
    for name in TITLES:
        table = d.tables.get(name)
        if table is None or table.empty:
            continue
        # the parts' shares of the whole step, also of a part whose change rounds to 0
        step_ms = (float(table["base_ms"].sum()), float(table["new_ms"].sum())) \
            if name == "diff_parts" else None
        lines += [f"### {_title(name, d)}"] if markdown else wrap(_title(name, d) + ":", width)
        lines += _table(*attribution_cells(name, shown(name, table), step_ms), markdown,
                        width) + [""]
    return "\n".join(lines) + "\n"
