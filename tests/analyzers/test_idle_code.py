"""Labels of the code the GPU waits for (analyzers/measure/idle_code.py), on hand-made ranges."""

from __future__ import annotations

import numpy as np
import pandas as pd
from profkit.analyzers.measure.idle_code import UNRECORDED, _Ranges

from profkit import schema as S


def _host(rows):
    """Ranges (name, kind, start_ns, end_ns) of one thread as the events table has them."""
    names, kinds, starts, ends = zip(*rows)
    return pd.DataFrame({S.TS_NS: np.array(starts, np.int64),
                         S.DUR_NS: np.array(ends, np.int64) - np.array(starts, np.int64),
                         S.NAME: pd.Categorical(names), S.KIND: pd.Categorical(kinds, categories=S.KINDS)})


def attribute(host: pd.DataFrame, idle) -> dict[str, int]:
    return _Ranges(host, idle).attribute(idle)


def _idle(*spans):
    return (np.array([s for s, _ in spans], np.int64), np.array([e for _, e in spans], np.int64))


def test_the_nearest_user_frame_names_the_innermost_range():
    """train.py's frame is the nearest user code above the sync (the torch frame between
    them is library code); the idle instants inside aten::item but outside the sync are
    aten::item's, under the same frame."""
    host = _host([("train.py(10): step", S.KIND_PYTHON, 0, 100),
                  ("site-packages/torch/nn/module.py(5): __call__", S.KIND_PYTHON, 0, 90),
                  ("aten::linear", S.KIND_CPU_OP, 10, 80),
                  ("aten::item", S.KIND_CPU_OP, 20, 30),
                  ("cudaStreamSynchronize", S.KIND_RUNTIME, 22, 28)])
    got = attribute(host, _idle((21, 29), (95, 105)))
    assert got == {"train.py(10): step -> cudaStreamSynchronize": 6,
                   "train.py(10): step -> aten::item": 2,
                   "train.py(10): step": 5,  # 95-100: the frame itself (no user frame above)
                   UNRECORDED: 5}  # 100-105: nothing recorded


def test_without_stacks_the_outermost_op_names_it():
    """No Python frames: the outermost op above is the prefix, unless it is the range itself
    or has its name; a lone op is its own label."""
    host = _host([("aten::linear", S.KIND_CPU_OP, 0, 50),
                  ("aten::addmm", S.KIND_CPU_OP, 5, 40),
                  ("aten::item", S.KIND_CPU_OP, 10, 20),
                  ("aten::mm", S.KIND_CPU_OP, 60, 70),
                  ("aten::mm", S.KIND_CPU_OP, 62, 66),
                  ("cudaLaunchKernel", S.KIND_RUNTIME, 80, 90)])
    got = attribute(host, _idle((12, 14), (45, 46), (61, 64), (85, 86)))
    assert got == {"aten::linear -> aten::item": 2,
                   "aten::linear": 1,  # 45-46: inside only aten::linear
                   "aten::mm": 3,  # 61-62 the outer mm, 62-64 the inner one (same name)
                   "cudaLaunchKernel": 1}


def test_a_long_name_is_cut_to_80_characters():
    long = "x" * 100
    host = _host([(long, S.KIND_ANNOTATION, 0, 10), ("aten::copy_", S.KIND_CPU_OP, 2, 8)])
    got = attribute(host, _idle((3, 4)))
    assert got == {"x" * 77 + "... -> aten::copy_": 1}
