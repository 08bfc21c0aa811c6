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
