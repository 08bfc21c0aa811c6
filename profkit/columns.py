"""Building typed numpy/pandas columns from lists of decoded values."""

from __future__ import annotations

import math
import re
import weakref
import zlib
from collections.abc import Callable

import numpy as np
import pandas as pd

INT64_SAFE = float(1 << 62)  # a float beyond this is no id, count or time of a real trace
_SAFE_INT = 1 << 62  # the same bound, compared exactly with ints


def to_float(values: list) -> np.ndarray:
    """float64 array; None and non-numbers (lists, objects, ints past float range) become NaN."""
    try:
        out = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        out = None
    # values that are all lists of one length make a 2-D array, and numpy reads True as 1:
    # each is no number, whatever the values beside it (the same value, the same float)
    if out is not None and out.ndim == 1 and (
            isinstance(values, np.ndarray) or bool not in set(map(type, values))):
        return out
    return np.array([_one_float(v) for v in values], dtype=np.float64)


def _one_float(value) -> float:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value)
        except (ValueError, OverflowError):
            pass
    return np.nan


def to_int(values, missing: int = -1) -> np.ndarray:
    """int64 array of a list or float array; NaN / None / non-numbers and values outside
    +-2**62 (which would not fit, or overflow once added to) become ``missing``."""
    arr = to_float(values)
    out = np.full(len(arr), missing, dtype=np.int64)
    ok = np.abs(arr) <= INT64_SAFE  # False for NaN
    out[ok] = arr[ok].astype(np.int64)
    return out


def us_to_ns(ts_us: np.ndarray) -> np.ndarray:
    """Microseconds (float, possibly ~1e15 for epoch-based traces) to int64 ns, without
    losing the sub-microsecond part to float64 rounding of the product."""
    whole = np.floor(ts_us)
    return whole.astype(np.int64) * 1000 + np.rint((ts_us - whole) * 1000).astype(np.int64)


def ids_to_int(values: list) -> tuple[np.ndarray, int]:
    """(pid/tid values as int64: ints as they are, strings and ints too large for int64 as
    a stable negative id; how many distinct ints were too large)."""
    try:  # the usual case, every value an int in range: numpy reads them as int64 at once
        plain = np.array(values)
    except (OverflowError, ValueError):
        plain = None
    if plain is not None and plain.dtype == np.int64 and plain.ndim == 1 \
            and (not len(plain) or -_SAFE_INT <= plain.min() and plain.max() <= _SAFE_INT):
        return plain, 0
    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=False)
    mapped = np.array([stable_id(u) for u in uniques], dtype=np.int64)
    oversized = sum(1 for u in uniques if isinstance(u, int) and not -INT64_SAFE <= u <= INT64_SAFE)
    return mapped[codes], oversized


def stable_id(value) -> int:
    """One pid/tid value as :func:`ids_to_int` maps it."""
    if isinstance(value, int) and -INT64_SAFE <= value <= INT64_SAFE:
        return value
    text = str(value)
    try:
        number = int(text)
    except ValueError:
        number = None
    if number is not None and -INT64_SAFE <= number <= INT64_SAFE:
        return number
    return -1 - zlib.crc32(text.encode())  # also ids too large for int64


def category_mask(column: pd.Series, pattern) -> np.ndarray:
    """Rows of a categorical column whose category matches a regex (checked per category):
    pattern text (pandas' ``str.contains``), or a compiled pattern (or any object with its
    ``search`` and ``pattern``, as ``classify.folded.FoldedPattern``) searched as it
    searches."""
    if not isinstance(pattern, str):
        def hits(cats: pd.Index) -> np.ndarray:
            return np.array([pattern.search(str(c)) is not None for c in cats], dtype=bool)

        key = ("search", type(pattern).__name__, pattern.pattern, getattr(pattern, "flags", 0))
        return _by_code(column, key, hits)

    def contains(cats: pd.Index) -> np.ndarray:
        # pandas' own answer but for text held as Python objects (Arrow-backed text is
        # searched by Arrow's regex engine), for which it is re.search of each
        if cats.dtype != object or cats.inferred_type != "string":
            return np.asarray(cats.str.contains(pattern, regex=True), dtype=bool)
        search = re.compile(pattern).search
        return np.array([search(c) is not None for c in cats], dtype=bool)

    return _by_code(column, ("match", pattern), contains)


def name_values(names: pd.Series, fn: Callable[[str], str]) -> np.ndarray:
    """``fn`` of each row's name, evaluated once per distinct name ("" where missing);
    ``name_values(names, str)`` is the names as Python strings. Never ``astype(str)`` of a
    whole categorical column: inside the analysis' Python-string mode pandas converts it row
    by row (~50 us a row: 24 s for the names of a 500k-event trace)."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes, distinct = names.array.codes, names.dtype.categories
    else:
        codes, distinct = pd.factorize(names.to_numpy(dtype=object))
    used = np.unique(codes[codes >= 0])
    values = np.full(len(distinct) + 1, "", dtype=object)  # the last: code -1
    values[used] = [fn(str(c)) for c in np.asarray(distinct, dtype=object)[used]]
    return values[codes]


def as_text(column: pd.Series) -> pd.Series:
    """``column.astype(str)``, for a categorical column converted once per distinct value
    (pandas converts it row by row: ~50 us a row in the analysis' Python-string mode), the
    same values, dtype, index and name."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.astype(str)
    shifted = column.array.codes.astype(np.intp) + 1  # 0: missing
    present = np.zeros(len(column.dtype.categories) + 1, dtype=bool)
    present[shifted] = True
    used = np.flatnonzero(present)
    position = np.zeros(len(present), dtype=np.intp)
    position[used] = np.arange(len(used))
    named = used > 0  # pandas converts every category: only the used ones, then
    small = pd.Categorical.from_codes(np.where(named, np.cumsum(named) - 1, -1),
                                      categories=column.dtype.categories.take(used[named] - 1),
                                      ordered=column.dtype.ordered)
    texts = pd.Series(small).astype(str)
    return pd.Series(texts.array.take(position[shifted]), index=column.index, name=column.name)


def values_in(column: pd.Series, values) -> np.ndarray:
    """Rows of ``column`` holding one of ``values``, as a bool array: for a categorical
    column, looked up by category code (~5x faster than ``Series.isin``, which the
    analyzers call dozens of times per rank on the events' kind)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.isin(values).to_numpy()
    wanted = tuple(values)
    return _by_code(column, ("in", wanted), lambda cats: _isin(cats, wanted))


def _isin(cats: pd.Index, wanted: tuple) -> np.ndarray:
    """``cats.isin(wanted)``: text categories looked up in a set (pandas' isin costs ~70 us
    a call, whatever the size)."""
    if cats.dtype != object or cats.inferred_type != "string" \
            or not all(isinstance(w, str) for w in wanted):
        return np.asarray(cats.isin(wanted), bool)
    found = set(wanted)
    return np.array([c in found for c in cats], dtype=bool)


# Per-category answers, kept while the categories live: every row selection of a table
# shares its categories, so a rank's dozens of lookups on the same column are one each.
_BY_CATEGORIES: dict[int, tuple[weakref.ref, dict]] = {}
# A column with fewer rows than this per category (a rank's kernels, of every event name)
# has its categories answered only where its rows use them.
PARTIAL_ROWS_PER_CATEGORY = 64
_FEW_HITS = 8  # at most this many categories hit: a comparison per hit beats a lookup


class _Answers:
    """One key's per-category answers: ``hit`` where ``known`` (a column's lookup fills in
    the categories its rows use), and the codes hit, once every category is known."""

    def __init__(self, size: int) -> None:
        self.hit = np.zeros(size + 1, dtype=bool)  # the last: code -1, never a hit
        self.known = np.zeros(size + 1, dtype=bool)
        self.known[-1] = True
        self.complete = False
        self.codes: np.ndarray | None = None  # the hit codes, once complete

    def learn(self, cats: pd.Index, codes: np.ndarray | None, per_category) -> None:
        """Answer the categories ``codes`` use (every one: None) not yet known."""
        if codes is None:
            todo = np.flatnonzero(~self.known[:-1])
        else:
            used = np.zeros(len(self.known), dtype=bool)
            used[codes] = True  # code -1 marks the last, known already
            todo = np.flatnonzero(used & ~self.known)
        if len(todo) == len(cats):
            self.hit[:-1] = per_category(cats)
        elif len(todo):
            self.hit[todo] = per_category(cats.take(todo))
        self.known[todo] = True
        if codes is None or self.known.all():
            self.complete = True
            self.codes = np.flatnonzero(self.hit)


def _by_code(column: pd.Series, key: tuple, per_category) -> np.ndarray:
    """``per_category(categories)`` (one bool per category, remembered under ``key``) read
    for every row by its code; a missing value (code -1) is False. A short column (see
    :data:`PARTIAL_ROWS_PER_CATEGORY`) has only the categories it uses answered; a few
    categories hit are found by comparing codes (~10x quicker than a lookup per row)."""
    cats = column.dtype.categories
    entry = _BY_CATEGORIES.get(id(cats))
    if entry is None or entry[0]() is not cats:
        ident = id(cats)
        entry = (weakref.ref(cats, lambda _gone: _BY_CATEGORIES.pop(ident, None)), {})
        _BY_CATEGORIES[ident] = entry
    answers = entry[1].get(key)
    if answers is None:
        answers = entry[1][key] = _Answers(len(cats))
    codes = column.array.codes
    if not answers.complete:
        partial = len(codes) < len(cats) * PARTIAL_ROWS_PER_CATEGORY
        answers.learn(cats, codes if partial else None, per_category)
    # the codes hit (of those known: every code of this column is)
    hits = answers.codes if answers.complete else np.flatnonzero(answers.hit)
    if len(hits) > _FEW_HITS:
        return answers.hit[codes]
    out = np.zeros(len(codes), dtype=bool)
    for code in hits.tolist():  # Python ints: compared in the codes' own small dtype
        out |= codes == code
    return out


def distinct(values) -> np.ndarray:
    """``np.unique(values)`` of integers, by a sort: numpy's own pass over int64 (a hash
    table, then a sort) costs ~15x more."""
    ordered = np.sort(np.asarray(values), kind="stable")
    keep = np.ones(len(ordered), dtype=bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def unique_rows(columns: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique`` of the rows of integer columns (``np.stack(columns, axis=1)``, ``axis=0``):
    (the distinct rows in order, as int64, each row's position among them, the count of
    each). Found as one int64 key per row, the columns' values in mixed radix, where their
    ranges leave room for it: ``axis=0`` sorts the rows as records, ~10x slower."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    radix = _radix_key(cols)
    if radix is None:
        rows, inverse, counts = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True,
                                          return_counts=True)
        return rows, inverse.reshape(-1), counts
    key, lows, spans = radix
    keys, inverse, counts = _distinct_keys(key, math.prod(spans))
    rows = np.empty((len(keys), len(cols)), dtype=np.int64)
    for j in reversed(range(len(cols))):
        rows[:, j] = keys % spans[j] + lows[j]
        keys = keys // spans[j]
    return rows, inverse.reshape(-1), counts


def _radix_key(cols: list[np.ndarray]) -> tuple[np.ndarray, list[int], list[int]] | None:
    """One int64 key per row of int64 columns, their values in mixed radix (each less its
    column's lowest, in a base of its column's span), with the lows and spans; None where
    there is no row or the spans' product leaves no room in int64."""
    if not len(cols[0]):
        return None
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - low + 1 for c, low in zip(cols, lows)]
    if math.prod(spans) >= 1 << 63:
        return None
    key = np.zeros(len(cols[0]), dtype=np.int64)
    for c, low, span in zip(cols, lows, spans):
        key = key * span + (c - low)
    return key, lows, spans


def _distinct_keys(key: np.ndarray, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(key, return_inverse=True, return_counts=True)`` of keys in [0, span): by
    a count per key where the span is small next to the keys (a pass, no sort)."""
    if span > 4 * len(key) + 4096:
        return np.unique(key, return_inverse=True, return_counts=True)
    counts = np.bincount(key, minlength=span)
    keys = np.flatnonzero(counts)
    at = np.zeros(span, dtype=np.intp)
    at[keys] = np.arange(len(keys))
    return keys.astype(np.int64), at[key], counts[keys]


def row_groups(columns: list) -> list[np.ndarray]:
    """The row positions of each distinct row of integer columns, each ascending (the values
    of ``groupby(columns).indices``, in no set order), from one int64 key per row (as
    :func:`unique_rows`) hashed where their ranges leave room for it."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    if not len(cols[0]):
        return []
    radix = _radix_key(cols)
    group = unique_rows(cols)[1] if radix is None else pd.factorize(radix[0])[0]
    count = int(group.max()) + 1
    if count <= 16:  # a pass per group beats a sort
        return [np.flatnonzero(group == g) for g in range(count)]
    order = np.argsort(group, kind="stable")
    return np.split(order, np.cumsum(np.bincount(group, minlength=count))[:-1])


def find_rows(table: list, queries: list) -> np.ndarray:
    """Per query row (``queries``: integer columns), the position of the equal row of
    ``table`` (integer columns whose rows are distinct), -1 where none is: what
    ``MultiIndex.get_indexer`` gives, by one mixed-radix int64 key per row (as
    :func:`unique_rows`) and a binary search, where the table's ranges leave room for it."""
    table = [np.asarray(c, dtype=np.int64) for c in table]
    queries = [np.asarray(c, dtype=np.int64) for c in queries]
    out = np.full(len(queries[0]), -1, dtype=np.intp)
    if not len(table[0]) or not len(out):
        return out
    radix = _radix_key(table)
    if radix is None:
        return pd.MultiIndex.from_arrays(table).get_indexer(pd.MultiIndex.from_arrays(queries))
    key, lows, spans = radix
    inside = np.ones(len(out), dtype=bool)
    want = np.zeros(len(out), dtype=np.int64)
    for q, low, span in zip(queries, lows, spans):
        inside &= (q >= low) & (q < low + span)
        want = want * span + np.clip(q - low, 0, span - 1)
    found = sorted_lookup(key, want, np.argsort(key, kind="stable"))
    return np.where(inside, found, -1)


def sorted_lookup(keys: np.ndarray, queries, sorter: np.ndarray | None = None) -> np.ndarray:
    """Per query, the position in ``keys`` of an equal key, -1 where none is: ``keys``
    sorted, or put in order by ``sorter`` (an argsort of them), searched once per query
    (the first of equal keys in that order)."""
    queries = np.asarray(queries)
    if not len(keys):
        return np.full(len(queries), -1, dtype=np.intp)
    at = np.minimum(np.searchsorted(keys, queries, sorter=sorter), len(keys) - 1)
    if sorter is not None:
        at = sorter[at]
    return np.where(keys[at] == queries, at, -1)


def aggregate(grouped, spec: dict[str, tuple[str, str]]) -> pd.DataFrame:
    """What ``grouped.agg(**spec)`` gives (named aggregation, ``{output: (column, how)}``;
    ``grouped`` a ``groupby(...)`` with its keys as the index), made with one pass per
    ``how`` over all of its columns instead of one per output: the same cython reductions,
    so the same values to the last bit, at a third of the cost on a rank's small tables."""
    arrays: dict[str, object] = {}
    by_how: dict[str, list[tuple[str, str]]] = {}
    index = None  # the groups: the same for every reduction of one groupby
    for out, (column, how) in spec.items():
        by_how.setdefault(how, []).append((out, column))
    for how, pairs in by_how.items():
        if how == "size":
            size = grouped.size()
            index = size.index
            arrays.update((out, size.array) for out, _ in pairs)
            continue
        done = getattr(grouped[list(dict.fromkeys(c for _, c in pairs))], how)()
        index, result = done.index, dict(done.items())
        arrays.update((out, result[column].array) for out, column in pairs)
    return pd.DataFrame({out: arrays[out] for out in spec}, index=index)
