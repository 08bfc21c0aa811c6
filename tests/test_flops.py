import math

import pytest

from profkit import schema as S
from profkit.flops import flops_from_shapes
from profkit.loader import load_run
from tests.factories import trace_doc, write_trace


@pytest.mark.parametrize("name, dims, expected", [
    ("aten::mm", [[2, 3], [3, 4]], 2 * 2 * 4 * 3),                      # 2MNK
    ("aten::addmm", [[4], [2, 3], [3, 4], [], []], 2 * 2 * 4 * 3),      # bias first
    ("aten::bmm", [[5, 2, 3], [5, 3, 4]], 5 * 2 * 2 * 4 * 3),
    ("aten::baddbmm", [[5, 2, 4], [5, 2, 3], [5, 3, 4]], 5 * 2 * 2 * 4 * 3),
    ("aten::_scaled_dot_product_flash_attention", [[1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8]],
     4 * 1 * 2 * 4 * 6 * 8),                                            # 4*B*H*S*Sk*D
    ("aten::_scaled_dot_product_flash_attention_backward",
     [[1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8]], 2.5 * 4 * 1 * 2 * 4 * 6 * 8),
])
def test_flops_from_shapes(name, dims, expected):
    assert flops_from_shapes(name, dims) == expected


@pytest.mark.parametrize("name, dims", [("aten::add", [[2, 3]]), ("aten::mm", [[2, 3]]),
                                         ("aten::mm", "not a list")])
def test_unknown_ops_and_bad_shapes_have_no_flops(name, dims):
    assert math.isnan(flops_from_shapes(name, dims))


def test_ingest_fills_flops_from_input_dims(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "dur": 5.0, "pid": 1,
               "tid": 1, "args": {"Input Dims": [[64, 32], [32, 16]], "Input type": ["float", "float"]}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": 0.5, "dur": 7.0, "pid": 1,
               "tid": 1, "args": {"Input Dims": [[64, 32], [16, 32], [16]]}}]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    ev = load_run(path, cache=False).ranks[0].events.set_index(S.NAME)
    assert ev.loc["aten::mm", S.FLOPS] == 2 * 64 * 16 * 32
    assert math.isnan(ev.loc["aten::linear", S.FLOPS])  # wrappers carry none: no double count
