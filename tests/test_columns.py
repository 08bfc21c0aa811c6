"""profkit.columns.values_in against pandas' own Series.isin."""

import numpy as np
import pandas as pd
import pytest

from profkit.columns import values_in

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
