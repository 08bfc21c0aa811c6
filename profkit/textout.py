"""Text for people: counts with the right plural, ranks as ``rank 3`` or ``ranks 0-7``, and
lines and tables that fit the terminal (prose wrapped at spaces, never inside a word; tables
with headers over two lines, long names cut, or the columns split when they still do not fit).
Pure formatting, no I/O besides asking the terminal its width."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections.abc import Iterable, Sequence

PIPE_WIDTH = 100  # when the output is not a terminal (a pipe, a file)
MIN_WIDTH = 60  # narrower terminals get this width (and lines wrap in the terminal)
MIN_CLIP = 16  # a name column is cut to no fewer characters than this to make a table fit
MIN_FOLD = 10  # a descriptive column wraps in no fewer characters than this
ELLIPSIS = "..."
GAP = "  "


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """``1 kernel``, ``2 kernels``, ``0 kernels``; ``many`` for irregular plurals."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def rank_ranges(ranks: Iterable) -> str:
    """Ranks as a compact string: [0, 1, 2, 3, 5] -> "0-3,5"."""
    ranks = sorted(set(int(r) for r in ranks))
    parts, start = [], None
    for i, r in enumerate(ranks):
        start = r if start is None else start
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ",".join(parts)


def ranks_text(ranks: Iterable) -> str:
    """``rank 3`` for one rank, ``ranks 0-3,5`` for several."""
    ranks = sorted(set(int(r) for r in ranks))
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


def terminal_width(to_terminal: bool = True) -> int:
    """Columns to lay text out in: ``$COLUMNS`` when set, else the terminal's, at least
    :data:`MIN_WIDTH`; :data:`PIPE_WIDTH` when the output is a pipe or a file."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:  # asked for, also in a pipe
        return max(int(columns), MIN_WIDTH)
    if not to_terminal:
        return PIPE_WIDTH
    return max(shutil.get_terminal_size((PIPE_WIDTH, 24)).columns, MIN_WIDTH)


# A number and its unit stay on one line ("1.47 ms/step", "14 %" never split).
_NUMBER_UNIT = re.compile(r"(?<=\d) (?=(?:ms|us|ns|s|B|kB|MB|GB|TB|GB/s|TFLOP/s|GFLOP/s|MHz|W|J)\b)")
_GLUE = "\xa0"  # textwrap does not break at a no-break space


def glue(text: str) -> str:
    """``text`` (a path, which may hold spaces) kept on one line by :func:`wrap`."""
    return text.replace(" ", _GLUE)


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``first + text`` wrapped at ``width`` columns at spaces, the following lines indented
    by ``rest`` (default: as deep as ``first``); a number keeps its unit on its line, and a
    part passed through :func:`glue` stays whole. A word longer than a line (a path, a URL)
    is never broken: it gets a line of its own, as long as it is."""
    rest = " " * len(first) if rest is None else rest
    glued = _NUMBER_UNIT.sub(_GLUE, text)
    lines = textwrap.wrap(glued, width, initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines] or [first.rstrip()]


# --- tables -------------------------------------------------------------------------------

def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]], width: int,
                indent: str = GAP, clip: Iterable[int] = (), fold: Iterable[int] = ()) -> list[str]:
    """Lines of a table of display strings within ``width`` columns: names left-aligned,
    numbers right-aligned. When the table is too wide its headers take two lines, then the
    cells of the columns in ``fold`` (indices of descriptive columns) wrap over lines (a word
    longer than the column broken), then the columns in ``clip`` (name columns) are cut, then
    the columns are split into tables one under another, each repeating the first column."""
    header = [str(h) for h in header]
    rows = [[str(v) for v in r] for r in rows]
    columns = list(range(len(header)))
    numeric = [_numeric([r[c] for r in rows]) for c in columns]
    avail = width - len(indent)
    widths = [max([len(header[c])] + [len(r[c]) for r in rows]) for c in columns]
    if _total(widths) <= avail:
        return _lay(header, rows, widths, numeric, indent, wrap_header=False)
    widths = [max([_longest_word(header[c])] + [len(r[c]) for r in rows]) for c in columns]
    folded = set(fold)
    for c in sorted(folded, key=lambda c: -widths[c]):  # the widest first
        least = max(MIN_FOLD, _longest_word(header[c]))
        widths[c] = _shrink(widths[c], _total(widths) - avail, least)
    cut = list(widths)
    for c in sorted(set(clip) - folded, key=lambda c: -cut[c]):
        cut[c] = _shrink(cut[c], _total(cut) - avail, max(MIN_CLIP, _longest_word(header[c])))
    if _total(cut) <= avail:
        rows = [[v if c in folded else _cut(v, cut[c]) for c, v in enumerate(r)] for r in rows]
        return _lay(header, rows, cut, numeric, indent, wrap_header=True, fold=folded)
    # split: each table is the first column and some others; the flexible columns are cut
    # (or folded) only as far as a table of the first column and one other needs
    flexible = set(clip) | folded
    least = {c: max(MIN_FOLD if c in folded else MIN_CLIP, _longest_word(header[c]))
             for c in flexible}
    if 0 in flexible:
        widest = max((least.get(c, widths[c]) for c in columns[1:]), default=0)
        widths[0] = max(least[0], min(widths[0], avail - len(GAP) - widest))
    for c in flexible - {0}:
        widths[c] = max(least[c], min(widths[c], avail - len(GAP) - widths[0]))
    rows = [[v if c in folded else _cut(v, widths[c]) for c, v in enumerate(r)] for r in rows]
    lines: list[str] = []
    for group in _groups(widths, avail):
        pick = [0] + group
        if lines:
            lines.append("")
        lines += _lay([header[c] for c in pick], [[r[c] for c in pick] for r in rows],
                      [widths[c] for c in pick], [numeric[c] for c in pick], indent,
                      wrap_header=True, fold={i for i, c in enumerate(pick) if c in folded})
    return lines


def _shrink(width: int, over: int, least: int) -> int:
    """A column's width less ``over`` columns, but not below ``least`` (nor above ``width``)."""
    return width if over <= 0 else max(width - over, min(width, least))


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * max(len(widths) - 1, 0)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _numeric(values: list[str]) -> bool:
    return all(not v or v[0] in "0123456789-+.<" for v in values)


def _cut(value: str, width: int) -> str:
    return value if len(value) <= width else value[:width - len(ELLIPSIS)] + ELLIPSIS


def _groups(widths: list[int], avail: int) -> list[list[int]]:
    """The columns after the first in groups that fit beside the first."""
    groups: list[list[int]] = [[]]
    for c in range(1, len(widths)):
        if groups[-1] and _total([widths[0]] + [widths[i] for i in groups[-1]] + [widths[c]]) > avail:
            groups.append([])
        groups[-1].append(c)
    return [g for g in groups if g] or [[]]


def _lay(header: list[str], rows: list[list[str]], widths: list[int], numeric: list[bool],
         indent: str, wrap_header: bool, fold: set[int] = frozenset()) -> list[str]:
    heads = [_wrap_cell(h, w) if wrap_header else [h] for h, w in zip(header, widths)]
    depth = max(len(h) for h in heads)
    heads = [[""] * (depth - len(h)) + h for h in heads]  # bottom-aligned over the values
    lines = [_line([h[i] for h in heads], widths, numeric, indent) for i in range(depth)]
    for row in rows:
        cells = [_wrap_cell(v, w, long_words=True) if c in fold else [v]
                 for c, (v, w) in enumerate(zip(row, widths))]
        for i in range(max(len(cell) for cell in cells)):  # a folded cell adds lines
            lines.append(_line([cell[i] if i < len(cell) else "" for cell in cells], widths,
                               numeric, indent))
    return lines


def _wrap_cell(text: str, width: int, long_words: bool = False) -> list[str]:
    """A cell over lines of ``width``; a word longer than that (an identifier in a folded
    cell) is broken only when ``long_words``."""
    return textwrap.wrap(text, width, break_long_words=long_words,
                         break_on_hyphens=False) or [""]


def _line(cells: list[str], widths: list[int], numeric: list[bool], indent: str) -> str:
    return (indent + GAP.join(v.rjust(w) if num else v.ljust(w)
                              for v, w, num in zip(cells, widths, numeric))).rstrip()
