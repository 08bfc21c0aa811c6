"""Building typed numpy/pandas columns from lists of decoded values."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd


def to_float(values: list) -> np.ndarray:
    """float64 array; None and non-numbers become NaN."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def to_int(values, missing: int = -1) -> np.ndarray:
    """int64 array of a list or float array; NaN / None / non-numbers become ``missing``."""
    arr = to_float(values)
    out = np.full(len(arr), missing, dtype=np.int64)
    ok = np.isfinite(arr)
    out[ok] = arr[ok].astype(np.int64)
    return out


def us_to_ns(ts_us: np.ndarray) -> np.ndarray:
    """Microseconds (float, possibly ~1e15 for epoch-based traces) to int64 ns, without
    losing the sub-microsecond part to float64 rounding of the product."""
    whole = np.floor(ts_us)
    return whole.astype(np.int64) * 1000 + np.rint((ts_us - whole) * 1000).astype(np.int64)


def ids_to_int(values: list) -> np.ndarray:
    """pid/tid values as int64: ints as they are, other strings as a stable negative id."""
    codes, uniques = pd.factorize(np.array(values, dtype=object), use_na_sentinel=False)
    mapped = np.array([_stable_id(u) for u in uniques], dtype=np.int64)
    return mapped[codes]


def _stable_id(value) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    try:
        return int(text)
    except ValueError:
        return -1 - zlib.crc32(text.encode())


def category_mask(column: pd.Series, pattern: str) -> np.ndarray:
    """Rows of a categorical column whose category matches a regex (checked per category)."""
    cats = column.cat.categories
    hit = np.asarray(cats.str.contains(pattern, regex=True), dtype=bool)
    codes = column.cat.codes.to_numpy()
    return np.where(codes >= 0, hit[codes], False) if len(cats) else np.zeros(len(column), bool)
