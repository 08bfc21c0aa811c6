"""stepwork._by_name (counts and integer sums per name, by category code) against a plain
grouping of the names as text, on random rows with missing and unused names."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.stepwork import OP_COLUMNS, _by_name


@pytest.mark.parametrize("seed", range(4))
def test_by_name_is_the_count_and_sums_of_each_name(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))
    words = np.array(["aten::mm", "aten::add", "Optimizer.step#SGD.step", "b"], dtype=object)
    values = words[rng.integers(0, len(words), n)]
    values[rng.random(n) < 0.1] = None
    names = pd.Series(pd.Categorical(values, categories=["zz_unused", *words[::-1]]), name="name")
    self_ns, total_ns = rng.integers(0, 10**12, (2, n))
    got = _by_name(3, pd.DataFrame({"name": names}), {"self_ns": self_ns, "total_ns": total_ns},
                   OP_COLUMNS)
    order = [c for c in names.cat.categories if c in set(values[pd.notna(values)])]
    want = []
    for name in order:
        mine = values == name
        want.append([3, name, int(mine.sum()), int(self_ns[mine].sum()), int(total_ns[mine].sum())])
    assert got.columns.tolist() == list(OP_COLUMNS)
    assert got.values.tolist() == want
    assert [str(got[c].dtype) for c in ("rank", "count", "self_ns", "total_ns")] == ["int64"] * 4
    floats = _by_name(3, pd.DataFrame({"name": names}), {"self_ns": self_ns.astype(float),
                                                         "total_ns": total_ns}, OP_COLUMNS)
    assert floats.values.tolist() == want  # the grouping path, for sums that are not integers
    assert got["name"].dtype == floats["name"].dtype


@pytest.mark.parametrize("seed", range(4))
def test_groups_by_code_are_the_first_classes_groupby_takes(seed):
    """Each kernel name's group from its first class and sub-class that is not missing (the
    pandas grouping's ``first``, "nan" where all are), on random rows with missing values."""
    from profkit.analyzers.measure.stepwork import _group, _groups_by_code

    from profkit import schema as S
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 200))

    def column(values, missing):
        picked = np.array(values, dtype=object)[rng.integers(0, len(values), n)]
        picked[rng.random(n) < missing] = None
        return pd.Categorical(picked, categories=["unused", *values])

    gpu = pd.DataFrame({S.NAME: column(["k1", "k2", "k3", "k4"], 0.1),
                        S.CLASS: column(["compute", "memcpy", "communication"], 0.3),
                        S.SUBCLASS: column(["gemm", "HtoD", "", "all_reduce"], 0.5)})
    first = gpu.groupby(gpu[S.NAME].cat.codes.to_numpy())[[S.CLASS, S.SUBCLASS]].first()
    first = first[first.index >= 0]
    names = np.asarray(gpu[S.NAME].cat.categories, dtype=object)[first.index.to_numpy()]
    want = {nm: _group(c, s) for nm, c, s in zip(names, first[S.CLASS].astype(str),
                                                 first[S.SUBCLASS].astype(str))}
    assert _groups_by_code(gpu) == want and len(want) > 0
