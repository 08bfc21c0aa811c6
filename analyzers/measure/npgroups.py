"""Group reductions of a few numpy columns, for the reduce's small tables.

A pandas ``groupby`` costs ~100-300 us of fixed overhead per call on the reduce's tables of a
few hundred rows; these do the same reductions with one stable sort per grouping. Values are
those pandas gives: ``first`` and ``idxmax`` in row order, ``max``/``min`` of integers and
``fmax`` of floats (NaN skipped, as pandas skips it), sums of integers exact. Groups are
numbered by :func:`codes`, in order of first appearance (``groupby(sort=False)``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from profkit.columns import unique_rows


def codes(values) -> tuple[np.ndarray, np.ndarray]:
    """(each row's group number, the groups' values), numbered in order of first appearance."""
    found, uniques = pd.factorize(np.asarray(values), sort=False)
    return found.astype(np.int64, copy=False), np.asarray(uniques)


class Groups:
    """Rows grouped by ``group`` (numbers 0..n-1, each present at least once)."""

    def __init__(self, group: np.ndarray, n: int):
        self.group, self.n = group, n
        self.order = np.argsort(group, kind="stable")
        self.starts = np.searchsorted(group[self.order], np.arange(n))
        self.size = np.diff(np.append(self.starts, len(group)))

    def _reduce(self, ufunc, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values)
        if not self.n:
            return values[:0]
        return ufunc.reduceat(values[self.order], self.starts)

    def max(self, values) -> np.ndarray:
        return self._reduce(np.maximum, values)

    def min(self, values) -> np.ndarray:
        return self._reduce(np.minimum, values)

    def fmax(self, values) -> np.ndarray:
        """Floats' max with NaN skipped (NaN where a group has nothing else)."""
        return self._reduce(np.fmax, values)

    def sum(self, values) -> np.ndarray:
        """Integers' sums (exact; floats would sum in row order, not pandas' Kahan sums)."""
        return self._reduce(np.add, values)

    def fsum(self, values) -> np.ndarray:
        """Floats' sums as pandas' ``groupby.sum`` makes them, to the last bit: its own
        compensated sums in row order (one call; a plain or Kahan sum differs in the last
        bit on real tables)."""
        if not self.n:
            return np.zeros(0)
        values = pd.Series(np.asarray(values, dtype=np.float64))
        return values.groupby(self.group, sort=True).sum().to_numpy()

    def all(self, values) -> np.ndarray:
        return self._reduce(np.logical_and, np.asarray(values, dtype=bool))

    def first(self, values) -> np.ndarray:
        return np.asarray(values)[self.order[self.starts]]

    def first_max_row(self, values) -> np.ndarray:
        """Each group's first row (in row order) holding its maximum (``idxmax``)."""
        values = np.asarray(values)
        top = self.max(values)[self.group] == values
        rows = np.where(top, np.arange(len(values)), len(values))
        return self._reduce(np.minimum, rows)


def cumcount(group: np.ndarray) -> np.ndarray:
    """Each row's position among the earlier rows of its group (``groupby.cumcount``)."""
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    new = np.ones(len(group), dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    at = np.arange(len(group))
    out = np.empty(len(group), dtype=np.int64)
    out[order] = at - np.maximum.accumulate(np.where(new, at, 0))
    return out


def ints_as_text(values: np.ndarray) -> np.ndarray:
    """Integers as Python strings, as ``Series.astype(str)`` writes them."""
    return np.asarray(values).astype(str).astype(object)


def sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each value's number among the sorted distinct values, a missing one last; those
    values, the missing one at the end)."""
    code, uniques = pd.factorize(values, sort=True)
    uniques = np.asarray(uniques, dtype=values.dtype if values.dtype != object else object)
    if (code < 0).any():
        code = np.where(code < 0, len(uniques), code)
        uniques = np.append(uniques, np.array([values[np.flatnonzero(pd.isna(values))[0]]],
                                              dtype=uniques.dtype))
    return code, uniques


def runs(values: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of equal values in sorted ``values``."""
    edges = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *edges.tolist(), len(values)]
    return list(zip(bounds[:-1], bounds[1:]))


def group_table(frame: pd.DataFrame, keys: list[str],
                spec: dict[str, tuple[str, str]]) -> pd.DataFrame | None:
    """``columns.aggregate(frame.groupby(keys), spec).reset_index()`` for ``how`` in size,
    sum (of integers), min and max (NaN skipped), nunique and first (of integers): the same table,
    dtypes and order (keys sorted), from one sort. None where it cannot promise that (a
    missing or categorical key, a float sum, text to reduce): the caller then asks pandas."""
    for col, how in spec.values():
        kind = frame[col].dtype.kind
        if not (how == "size" or (kind in "iu" and how in ("sum", "min", "max", "nunique", "first"))
                or (kind == "f" and how in ("min", "max"))):
            return None
    if any(isinstance(frame[k].dtype, pd.CategoricalDtype) for k in keys):
        return None
    key_codes = []
    for k in keys:
        code, _ = pd.factorize(frame[k].to_numpy(), sort=True)
        if (code < 0).any():
            return None
        key_codes.append(code)
    _, group, _ = unique_rows(key_codes)
    n = int(group.max()) + 1 if len(group) else 0
    g = Groups(group.astype(np.int64), n)
    out = {k: frame[k].take(g.first(np.arange(len(frame)))).reset_index(drop=True)
           for k in keys}
    for name, (col, how) in spec.items():
        values = frame[col].to_numpy()
        if how == "size":
            out[name] = g.size.astype(np.int64)
        elif how == "nunique":
            pairs = unique_rows([group, codes(values)[0]])[0][:, 0]
            out[name] = np.bincount(pairs, minlength=n).astype(np.int64)
        elif how == "first":
            out[name] = g.first(values)
        elif values.dtype.kind == "f":
            out[name] = g._reduce(np.fmax if how == "max" else np.fmin, values)
        else:
            out[name] = getattr(g, how)(values.astype(np.int64))
    return pd.DataFrame(out)
