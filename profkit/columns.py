"""Building typed numpy/pandas columns from lists of decoded values."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd

INT64_SAFE = float(1 << 62)  # a float beyond this is no id, count or time of a real trace


def to_float(values: list) -> np.ndarray:
    """float64 array; None and non-numbers (lists, objects, ints past float range) become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
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


def category_mask(column: pd.Series, pattern: str) -> np.ndarray:
    """Rows of a categorical column whose category matches a regex (checked per category)."""
    cats = column.cat.categories
    hit = np.asarray(cats.str.contains(pattern, regex=True), dtype=bool)
    codes = column.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[codes], False) if len(cats) else np.zeros(len(column), bool)


def values_in(column: pd.Series, values) -> np.ndarray:
    """Rows of ``column`` holding one of ``values``, as a bool array: for a categorical
    column, looked up by category code (~5x faster than ``Series.isin``, which the
    analyzers call dozens of times per rank on the events' kind)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column.isin(values).to_numpy()
    lut = np.zeros(len(column.cat.categories) + 1, dtype=bool)  # code -1 (missing): the last
    lut[:-1] = column.cat.categories.isin(values)
    return lut[column.cat.codes.to_numpy()]
