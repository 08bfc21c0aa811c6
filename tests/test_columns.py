"""profkit.columns against pandas' own answers: values_in and category_mask against
Series.isin / str.contains, aggregate against named aggregation, columns.name_values
against a per-row call."""

import contextlib
import re

import numpy as np
import pandas as pd
import pytest

from profkit.columns import (
    _by_code,
    aggregate,
    as_text,
    category_mask,
    distinct,
    find_rows,
    ids_to_int,
    name_values,
    row_groups,
    sorted_lookup,
    stable_id,
    unique_rows,
    values_in,
)
from profkit.strings import python_strings

VALUES = ["kernel", "cpu_op", None, "python", "kernel", "memcpy", None, "runtime"]


@pytest.mark.parametrize("wanted", [("kernel", "memcpy"), ("python",), (), ("absent",),
                                    ("kernel", "cpu_op", "python", "memcpy", "runtime")])
@pytest.mark.parametrize("dtype", ["category", object])
def test_values_in_is_series_isin(wanted, dtype):
    column = pd.Series(VALUES, dtype=dtype)
    got = values_in(column, wanted)
    assert isinstance(got, np.ndarray) and got.dtype == bool
    np.testing.assert_array_equal(got, column.isin(wanted).to_numpy())


def test_a_missing_value_is_never_in():
    column = pd.Series(VALUES, dtype="category")
    assert column.cat.codes.min() == -1  # the missing rows carry code -1
    assert not values_in(column, column.cat.categories)[[2, 6]].any()


def test_lookups_follow_the_categories_not_their_memory_address():
    """The per-category answers are remembered per categories object: a column built after
    an earlier one was freed (whose address it may reuse) never reads the earlier answers."""
    rng = np.random.default_rng(7)
    for i in range(200):
        labels = [f"k{j}" for j in rng.permutation(12)[: 2 + i % 9]]
        column = pd.Series(pd.Categorical(rng.choice(labels + [None], 30), categories=labels))
        wanted = tuple(labels[: 1 + i % 3])
        np.testing.assert_array_equal(values_in(column, wanted), column.isin(wanted).to_numpy())
        np.testing.assert_array_equal(values_in(column.iloc[::2], wanted),
                                      column.iloc[::2].isin(wanted).to_numpy())
        expect = column.astype(object).str.contains("^k[0-4]$", regex=True, na=False)
        np.testing.assert_array_equal(category_mask(column, "^k[0-4]$"), expect.to_numpy(bool))
        del column


@pytest.mark.parametrize("seed", range(6))
def test_short_and_long_selections_agree_with_pandas(seed):
    """Row selections of one table, short (only the categories they use answered) and long
    (all answered), in any order and with few or many categories hit, give str.contains' /
    isin's answers."""
    rng = np.random.default_rng(seed)
    labels = [f"{rng.choice(['ab', 'Ab', 'c', 'x'])}{j}" for j in range(300)]
    events = pd.Series(pd.Categorical(rng.choice(labels + [None], 40_000), categories=labels))
    wanted = tuple(labels[: 1 + seed * 40: 7])  # 1 to 29 categories
    for _ in range(12):
        rows = np.sort(rng.choice(len(events), int(rng.choice([5, 50, 500, 40_000])),
                                  replace=False))
        column = events.iloc[rows]
        text = column.astype(object).str
        np.testing.assert_array_equal(category_mask(column, "^(?:ab|c)"),
                                      text.contains("^(?:ab|c)", na=False).to_numpy(bool))
        np.testing.assert_array_equal(category_mask(column, re.compile("^ab", re.IGNORECASE)),
                                      text.contains("^ab", case=False, na=False).to_numpy(bool))
        np.testing.assert_array_equal(values_in(column, wanted), column.isin(wanted).to_numpy())


def test_a_short_column_has_only_its_own_categories_answered():
    labels = [f"n{j}" for j in range(1000)]
    events = pd.Series(pd.Categorical(np.repeat(labels, 3), categories=labels))
    asked: list[str] = []

    def ends_in_7(cats: pd.Index) -> np.ndarray:
        asked.extend(cats)
        return np.array([c.endswith("7") for c in cats], dtype=bool)

    key = ("test", "ends in 7")
    short = events.iloc[[3, 4, 30, 2997, 2999]]  # n1, n1, n10, n999, n999
    assert _by_code(short, key, ends_in_7).tolist() == [False, False, False, False, False]
    assert sorted(asked) == ["n1", "n10", "n999"]
    asked.clear()
    got = _by_code(events, key, ends_in_7)  # the others, once each
    assert len(asked) == 997 and not {"n1", "n10", "n999"} & set(asked)
    np.testing.assert_array_equal(got, np.repeat([lab.endswith("7") for lab in labels], 3))
    asked.clear()
    assert _by_code(events.iloc[::-7], key, ends_in_7).tolist() == \
        [lab.endswith("7") for lab in np.repeat(labels, 3)[::-7]]
    assert not asked


@pytest.mark.parametrize("groups", [3, 40])
@pytest.mark.parametrize("high", [50, 1 << 40])  # 1 << 40: keys past int64, unique_rows'
def test_row_groups_are_the_groupby_indices(groups, high):
    rng = np.random.default_rng(groups)
    pairs = rng.integers(-high, high, (groups, 2))
    rows = pairs[rng.integers(0, groups, 2000)]
    got = row_groups([rows[:, 0], rows[:, 1]])
    want = pd.DataFrame(rows).groupby([0, 1]).indices
    assert sorted(g.tolist() for g in got) == sorted(v.tolist() for v in want.values())
    assert row_groups([np.array([], np.int64)]) == []


def _frame(seed: int, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n) * 1e3
    x[rng.random(n) < 0.2] = np.nan
    return pd.DataFrame({
        "key": pd.Categorical(rng.choice(["b", "a", "c", "unused"], n), categories=["c", "b", "a", "unused"]),
        "k2": rng.choice([1.0, 2.0, np.nan], n),
        "ns": rng.integers(0, 10**12, n),
        "x": x,
        "text": rng.choice(["p", "q", None], n),
        "flag": rng.random(n) < 0.5,
    })


SPEC = {"calls": ("ns", "size"), "ns": ("ns", "sum"), "x_sum": ("x", "sum"),
        "x_min": ("x", "min"), "x_max": ("x", "max"), "x_first": ("x", "first"),
        "x_median": ("x", "median"), "text": ("text", "first"), "flag": ("flag", "all"),
        "n_text": ("text", "nunique"), "ns_max": ("ns", "max")}


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("groupby", [
    {"by": "key", "sort": False, "observed": True}, {"by": "key", "observed": False},
    {"by": ["key", "k2"], "dropna": False, "observed": True}, {"by": "k2"}])
def test_aggregate_is_named_aggregation(seed, groupby):
    frame = _frame(seed)
    groupby = dict(groupby)  # the parameters are shared between cases
    by = groupby.pop("by")
    got = aggregate(frame.groupby(by, **groupby), SPEC)
    expect = frame.groupby(by, **groupby).agg(**SPEC)
    pd.testing.assert_frame_equal(got, expect, check_exact=True)


def test_name_values_calls_once_per_distinct_name():
    names = pd.Series(pd.Categorical(["gemm", None, "copy", "gemm", "gemm"],
                                     categories=["unused", "copy", "gemm"]))
    seen: list[str] = []

    def fn(name: str) -> str:
        seen.append(name)
        return name.upper()

    got = name_values(names, fn)
    assert got.tolist() == ["GEMM", "", "COPY", "GEMM", "GEMM"]
    assert sorted(seen) == ["copy", "gemm"]  # neither the unused category nor the missing row
    plain = name_values(pd.Series(["x", None, "y", "x"], dtype=object), str.upper)
    assert plain.tolist() == ["X", "", "Y", "X"]


def test_a_compiled_pattern_is_searched_with_its_flags():
    import re

    column = pd.Series(pd.Categorical(["cudaMemcpyAsync", "MEMCPY HtoD", None, "gemm", "memset"]))
    rx = re.compile(r"memcpy", re.IGNORECASE)
    expect = [isinstance(v, str) and bool(rx.search(v)) for v in column.astype(object)]
    assert category_mask(column, rx).tolist() == expect == [True, True, False, False, False]
    # the text of the same pattern is case-sensitive: a different answer, not a stale one
    assert category_mask(column, rx.pattern).tolist() == [False, False, False, False, False]


@pytest.mark.parametrize("values", [
    [1, 2, 3], [], [True, 2], [True, False], [1, "a"], [None, 1], ["12", 3, "x"], [1.5, 2],
    [1 << 62, -(1 << 62)], [(1 << 62) + 1, 1], [-(1 << 62) - 1], [1 << 63, 1], [1 << 64],
])
def test_ids_to_int_maps_each_value_as_stable_id_does(values):
    """Plain ints take a fast path; the rest, and ints past 2**62 (exactly: 2**62 + 1 is past
    it though float(2**62 + 1) is not), are mapped one distinct value at a time."""
    got, oversized = ids_to_int(values)
    # pandas' factorize reads None as NaN: the stable id of the text "nan"
    want = [stable_id("nan" if v is None else v) for v in values]
    assert got.dtype == np.int64 and got.tolist() == want
    assert oversized == len({v for v in values if isinstance(v, int) and abs(v) > 1 << 62})


def test_name_values_of_str_reads_a_categorical_through_its_categories():
    import pandas as pd


    col = pd.Series(pd.Categorical(["aten::mm", None, "aten::linear", "aten::mm"]))
    assert list(name_values(col, str)) == ["aten::mm", "", "aten::linear", "aten::mm"]
    plain = pd.Series(["a", "b"], dtype=object)
    assert list(name_values(plain, str)) == ["a", "b"]
    # inside the analysis' Python-string mode too (where astype(str) converts every row)
    from profkit.strings import python_strings

    with python_strings():
        assert list(name_values(col.iloc[::-1], str)) == ["aten::mm", "aten::linear", "", "aten::mm"]


@pytest.mark.parametrize("high", [1, 7, 300, 3_000_000, 1 << 40])  # the last two: no room for one key
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int64])
def test_unique_rows_is_numpy_unique_of_the_rows(high, dtype):
    rng = np.random.default_rng(high)
    high = min(high, np.iinfo(dtype).max)
    own = rng.integers(0, high, 400).astype(dtype)
    user, outer = rng.integers(-1, high, (2, 400))
    for columns in ([own], [own, user], [own, user, outer], [outer[:0], own[:0]]):
        got = unique_rows(columns)
        want = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True,
                         return_counts=True)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].ravel().tolist()
        assert got[2].tolist() == want[2].tolist()


@pytest.mark.parametrize("dtype", [np.int8, np.int64])
def test_distinct_is_numpy_unique(dtype):
    rng = np.random.default_rng(3)
    for values in (rng.integers(-50, 50, 500), rng.integers(0, 3, 20), np.array([], int)):
        values = values.astype(dtype)
        assert distinct(values).tolist() == np.unique(values).tolist()
        assert distinct(values).dtype == np.unique(values).dtype


@pytest.mark.parametrize("python_mode", [True, False])
def test_as_text_is_astype_str(python_mode):
    rng = np.random.default_rng(5)
    words = np.array(["aten::mm", "sm90_xmma_gemm", "", "nan", "a b"], dtype=object)
    for n in (0, 1, 50):
        values = words[rng.integers(0, len(words), n)].astype(object)
        values[rng.random(n) < 0.2] = None  # missing names
        column = pd.Series(pd.Categorical(values, categories=[*words, "unused"]),
                           index=rng.permutation(n) + 7, name="name").iloc[::2]
        with python_strings() if python_mode else contextlib.nullcontext():
            got, want = as_text(column), column.astype(str)
        pd.testing.assert_series_equal(got, want)
        assert [type(v) for v in got] == [type(v) for v in want]
    plain = pd.Series([1, 2], name="x")
    pd.testing.assert_series_equal(as_text(plain), plain.astype(str))


@pytest.mark.parametrize("high", [1, 9, 1000, 1 << 40])  # the last: no room for one key
def test_find_rows_is_multiindex_get_indexer(high):
    rng = np.random.default_rng(high)
    for n_table, n_query in ((300, 500), (0, 5), (5, 0), (1, 1)):
        ext = rng.integers(-1, high, n_table)
        step = rng.integers(-1, 4, n_table)
        table = pd.MultiIndex.from_arrays([ext, step]).drop_duplicates()
        columns = [table.get_level_values(0).to_numpy(), table.get_level_values(1).to_numpy()]
        queries = [rng.integers(-3, high + 3, n_query), rng.integers(-2, 6, n_query)]
        if n_table and n_query:  # some queries hit the table
            pick = rng.integers(0, len(table), n_query // 2)
            queries[0][:len(pick)], queries[1][:len(pick)] = columns[0][pick], columns[1][pick]
        want = table.get_indexer(pd.MultiIndex.from_arrays(queries)) if len(table) \
            else np.full(n_query, -1)
        assert find_rows(columns, queries).tolist() == want.tolist()


@pytest.mark.parametrize("sorted_keys", [True, False])
def test_sorted_lookup_finds_the_first_equal_key(sorted_keys):
    rng = np.random.default_rng(7)
    for n_keys, n_query in ((400, 600), (0, 4), (3, 0), (1, 1)):
        keys = rng.integers(-5, 60, n_keys)  # repeats, as correlations of replays
        if sorted_keys:
            keys = np.sort(keys)
        sorter = None if sorted_keys else np.argsort(keys, kind="stable")
        queries = rng.integers(-8, 64, n_query)
        order = range(n_keys) if sorter is None else sorter.tolist()
        want = [next((i for i in order if keys[i] == q), -1) for q in queries.tolist()]
        assert sorted_lookup(keys, queries, sorter).tolist() == want


def test_values_in_of_number_categories_is_series_isin():
    """Categories that are not text (numbers; a wanted value of another type) take pandas'
    isin, so 1 and 1.0 match as there."""
    column = pd.Series(pd.Categorical([1, 2, 3, None, 2], categories=[3, 2, 1]))
    for wanted in ((2,), (1.0, 3), ("2",), ()):
        np.testing.assert_array_equal(values_in(column, wanted), column.isin(wanted).to_numpy())
    text = pd.Series(pd.Categorical(["a", "b", None], categories=["b", "a"]))
    np.testing.assert_array_equal(values_in(text, ("a", 1)), text.isin(("a", 1)).to_numpy())


def test_arrow_text_categories_are_searched_as_pandas_searches_them():
    """Categories held as pandas' Arrow-backed text (tables read back from a cache) take
    pandas' own str.contains and isin; Python-object text the per-category re.search."""
    arrow = pd.Series(pd.Categorical(["ab", "cd", None, "abc"],
                                     categories=pd.Index(["ab", "cd", "abc"], dtype="str")))
    assert arrow.dtype.categories.dtype != object
    for column in (arrow, arrow.astype(object).astype("category")):
        text = column.astype(object).str
        np.testing.assert_array_equal(category_mask(column, "^ab"),
                                      text.contains("^ab", na=False).to_numpy(bool))
        np.testing.assert_array_equal(values_in(column, ("cd", "abc")),
                                      column.isin(("cd", "abc")).to_numpy())
