"""npgroups' reductions against pandas' groupby on random small tables."""

import numpy as np
import pandas as pd
from profkit.analyzers.measure.npgroups import Groups, codes, cumcount, ints_as_text


def _table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 200
    floats = rng.normal(size=n) * 1e6
    floats[rng.random(n) < 0.2] = np.nan
    return pd.DataFrame({"key": rng.choice(["b", "a", "c", "d"], n),
                         "i": rng.integers(-50, 50, n), "f": floats,
                         "flag": rng.random(n) < 0.8})


def test_reductions_match_pandas_groupby():
    for seed in range(5):
        t = _table(seed)
        code, keys = codes(t["key"].to_numpy(object))
        g = Groups(code, len(keys))
        by = t.groupby("key", sort=False)
        assert list(keys) == list(by.size().index)
        assert np.array_equal(g.size, by.size().to_numpy())
        assert np.array_equal(g.max(t["i"].to_numpy()), by["i"].max().to_numpy())
        assert np.array_equal(g.min(t["i"].to_numpy()), by["i"].min().to_numpy())
        assert np.array_equal(g.sum(t["i"].to_numpy()), by["i"].sum().to_numpy())
        assert np.array_equal(g.fmax(t["f"].to_numpy()), by["f"].max().to_numpy(), equal_nan=True)
        assert np.array_equal(g.all(t["flag"].to_numpy()), by["flag"].all().to_numpy())
        assert np.array_equal(g.first(t["i"].to_numpy()), by["i"].first().to_numpy())
        assert np.array_equal(g.first_max_row(t["i"].to_numpy()), by["i"].idxmax().to_numpy())
        assert np.array_equal(cumcount(code), by.cumcount().to_numpy())
        sums = g.fsum(t["f"].to_numpy() / 7.0)  # inexact values: the order and carry show
        assert np.array_equal(sums, (t["f"] / 7.0).groupby(t["key"], sort=False).sum().to_numpy())


def test_integers_as_text():
    assert list(ints_as_text(np.array([-1, 0, 12]))) == ["-1", "0", "12"]
    assert type(ints_as_text(np.array([5]))[0]) is str


def test_no_groups():
    g = Groups(np.empty(0, dtype=np.int64), 0)
    assert len(g.max(np.empty(0, dtype=np.int64))) == 0 and len(g.size) == 0


def test_group_table_is_the_sorted_groupby():
    from profkit.analyzers.measure.npgroups import group_table

    from profkit.columns import aggregate

    rng = np.random.default_rng(7)
    n = 300
    t = pd.DataFrame({"name": rng.choice(["k2", "k1", "k10", "a"], n),
                      "cls": rng.choice(["compute", "memcpy"], n),
                      "rank": rng.integers(0, 5, n), "ns": rng.integers(0, 10**12, n)})
    spec = dict(total=("ns", "sum"), low=("ns", "min"), high=("ns", "max"),
                ranks=("rank", "nunique"), opening=("ns", "first"))
    got = group_table(t, ["name", "cls"], spec)
    pd.testing.assert_frame_equal(got, aggregate(t.groupby(["name", "cls"]), spec).reset_index(),
                                  check_exact=True)
    assert group_table(t.assign(ns=t["ns"] / 3), ["name"], spec) is None  # floats: pandas'


def test_group_table_by_integer_keys_of_other_widths():
    """Keys of int32 and int64 (the memory table's device and step), first and max of
    integers: pandas' sorted grouping, dtypes included."""
    from profkit.analyzers.measure.npgroups import group_table

    rng = np.random.default_rng(3)
    n = 500
    t = pd.DataFrame({"device": rng.integers(0, 3, n).astype(np.int32),
                      "step": rng.integers(-1, 6, n), "a": rng.integers(0, 1 << 40, n),
                      "b": rng.integers(-5, 5, n)})
    spec = dict(start=("a", "first"), peak=("a", "max"), low=("b", "first"))
    want = t.groupby(["device", "step"], sort=True).agg(**spec).reset_index()
    pd.testing.assert_frame_equal(group_table(t, ["device", "step"], spec), want,
                                  check_exact=True)
