"""The data codec: results round-trip as data, and hostile bytes never run code."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.result import Finding

from profkit import datacodec
from profkit.datacodec import CodecError
from profkit.model import SkippedFile


def test_nested_values_round_trip():
    frame = pd.DataFrame({"rank": [0, 1], "name": pd.Categorical(["a", "b"]),
                          "x": [1.5, np.nan]}, index=[10, 20])
    value = {0: ("a", 1, 2.5, None, True), "nan": float("nan"), "inf": float("-inf"),
             "frame": frame, "series": pd.Series([1, 2], name="s"),
             "array": np.arange(6, dtype=np.int32).reshape(2, 3), "list": [[], {}],
             "finding": Finding("compute", "info", "m", "r", {"k": 1.0}, rank=3),
             "skipped": SkippedFile("p", "why")}
    out = datacodec.decode(datacodec.encode(value))
    assert out[0] == ("a", 1, 2.5, None, True)
    assert np.isnan(out["nan"]) and out["inf"] == float("-inf")
    pd.testing.assert_frame_equal(out["frame"], frame)
    pd.testing.assert_series_equal(out["series"], pd.Series([1, 2], name="s"))
    assert out["array"].dtype == np.int32 and out["array"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert out["list"] == [[], {}]
    assert out["finding"] == Finding("compute", "info", "m", "r", {"k": 1.0}, rank=3)
    assert out["skipped"] == SkippedFile("p", "why")


@dataclass
class NotRegistered:
    x: int = 1


def test_unregistered_classes_are_refused_both_ways():
    with pytest.raises(CodecError, match="not a registered"):
        datacodec.encode({"a": NotRegistered()})
    tree = b'{"$dc":"os:system","f":{"command":"true"}}'
    forged = datacodec.MAGIC + len(tree).to_bytes(8, "little") + tree
    with pytest.raises(CodecError, match="not a registered"):
        datacodec.decode(forged)
    with pytest.raises(CodecError, match="cannot store"):
        datacodec.encode({1, 2})


@pytest.mark.parametrize("blob", [
    b"", b"junk", pickle.dumps({"a": 1}), datacodec.MAGIC, datacodec.MAGIC + b"\x05",
    datacodec.MAGIC + (10**6).to_bytes(8, "little") + b"{}",
    datacodec.encode({"a": pd.DataFrame({"x": [1]})})[:-10],
])
def test_bad_bytes_raise_codec_error(blob):
    with pytest.raises(CodecError):
        datacodec.decode(blob)


def test_a_reference_to_a_missing_table_is_an_error():
    tree = b'{"$df":3}'
    blob = datacodec.MAGIC + len(tree).to_bytes(8, "little") + tree
    with pytest.raises(CodecError, match="missing frame"):
        datacodec.decode(blob)
