import contextlib

import numpy as np
import pandas as pd
import pytest

from profkit import schema as S
from profkit.columns import us_to_ns
from profkit.strings import python_strings as strings
from profkit.trace import tracefile
from profkit.trace.ingest import _categorical, build_tables
from tests.factories import BASE_NS, trace_doc, write_trace


@pytest.fixture
def tables(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc())
    return _three(build_tables(tracefile.load(path)))


def _three(tables):
    """(events, collectives, steps) of ingest's tables."""
    return tables.frames["events"], tables.frames["collectives"], tables.frames["steps"]


def by_name(ev, prefix):
    return ev[ev[S.NAME].astype(str).str.startswith(prefix)].iloc[0]


def test_timestamps_are_epoch_ns(tables):
    ev, _, _ = tables
    gemm = by_name(ev, "sm90_xmma_gemm")
    assert gemm[S.TS_NS] == BASE_NS + 100_000
    assert gemm[S.DUR_NS] == 400_000


def test_us_to_ns_keeps_submicrosecond_part_of_epoch_microseconds():
    # 1.7e15 us: multiplying by 1000 in float64 would round to a multiple of 256 ns.
    assert us_to_ns(np.array([1_700_000_000_000_000.5]))[0] == 1_700_000_000_000_000_500


def test_kernel_classes(tables):
    ev, _, _ = tables
    assert by_name(ev, "sm90_xmma_gemm")[S.CLASS] == S.CLS_COMPUTE
    assert by_name(ev, "sm90_xmma_gemm")[S.SUBCLASS] == "gemm"
    assert by_name(ev, "void at::native::vectorized_elementwise")[S.SUBCLASS] == "elementwise"
    nccl = by_name(ev, "ncclDevKernel")
    assert (nccl[S.CLASS], nccl[S.SUBCLASS]) == (S.CLS_COMMUNICATION, "all_reduce")
    copy = by_name(ev, "Memcpy")
    assert (copy[S.CLASS], copy[S.SUBCLASS], copy[S.BYTES]) == (S.CLS_MEMCPY, "HtoD", 1 << 20)
    assert by_name(ev, "cudaLaunchKernel")[S.CLASS] == ""


def test_steps_follow_the_launch_not_the_kernel_start(tmp_path):
    events = trace_doc()["traceEvents"]
    # A kernel launched in step 1 (at 900 us) that runs in step 2's time range.
    events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 900.0, "dur": 2.0,
         "pid": 100, "tid": 100, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "late_gemm", "ts": 1500.0, "dur": 10.0, "pid": 0,
         "tid": 7, "args": {"correlation": 9, "stream": 7, "device": 0}},
    ]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    ev, _, steps = _three(build_tables(tracefile.load(path)))
    assert list(steps[S.STEP]) == [1, 2]
    assert list(steps[S.DUR_NS]) == [1_000_000, 1_000_000]
    assert by_name(ev, "late_gemm")[S.STEP] == 1
    assert by_name(ev, "void at::native::vectorized")[S.STEP] == 2
    assert by_name(ev, "cudaLaunchKernel")[S.STEP] == 1


def test_collective_args_and_bytes(tables):
    _, coll, _ = tables
    assert len(coll) == 1
    row = coll.iloc[0]
    assert row[S.COLL_NAME] == "all_reduce"
    assert row[S.MSG_BYTES] == 4096 * 4
    assert (row[S.GROUP_SIZE], row[S.SEQ], row[S.PG_NAME]) == (2, 7, "0")
    assert row[S.ON_GPU]
    assert row[S.TS_NS] == BASE_NS + 500_000


def test_kernel_args_come_from_record_param_comms_when_the_kernel_lacks_them(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 10.0, "dur": 50.0,
         "pid": 100, "tid": 100, "args": {"Collective name": "_allgather_base", "dtype": "BFloat16",
                                          "In msg nelems": 10, "Out msg nelems": 20, "Group size": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 20.0, "dur": 5.0,
         "pid": 100, "tid": 100, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllGather_RING_LL_Sum_int8_t", "ts": 30.0,
         "dur": 40.0, "pid": 0, "tid": 20, "args": {"correlation": 5, "stream": 20}},
    ]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    _, coll, _ = _three(build_tables(tracefile.load(path)))
    row = coll.iloc[0]
    assert row[S.COLL_NAME] == "all_gather"
    assert row[S.MSG_BYTES] == 20 * 2
    assert row[S.CPU_TS_NS] == BASE_NS + 10_000


def test_cpu_backend_collectives_come_from_cpu_ops(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 10.0, "dur": 50.0,
         "pid": 100, "tid": 100, "args": {"Collective name": "allreduce", "dtype": "Float",
                                          "In msg nelems": 8, "Out msg nelems": 8}},
    ]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    _, coll, _ = _three(build_tables(tracefile.load(path)))
    assert len(coll) == 1 and not coll.iloc[0][S.ON_GPU]
    assert coll.iloc[0][S.DUR_NS] == 50_000


def test_trace_without_base_time_uses_absolute_microseconds(tmp_path):
    doc = trace_doc()
    del doc["baseTimeNanoseconds"]
    path = write_trace(tmp_path / "t.json", doc)
    ev, _, _ = _three(build_tables(tracefile.load(path)))
    assert by_name(ev, "sm90_xmma_gemm")[S.TS_NS] == 100_000


def test_string_pids_and_missing_fields_do_not_break_ingest(tmp_path):
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1.0, "dur": 2.0},
        {"ph": "X", "name": "no category", "pid": 1, "tid": 1, "ts": 3.0},
        {"ph": "X", "cat": "kernel", "name": "no timestamp", "pid": 0, "tid": 7},
        {"ph": "i", "name": "instant", "pid": 1, "tid": 1, "ts": 4.0, "s": "t"},
    ]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    ev, coll, steps = _three(build_tables(tracefile.load(path)))
    assert len(ev) == 2  # the event without ts cannot be placed; the instant is not an X
    assert ev[S.PID].dtype == np.int64
    assert ev[ev[S.NAME] == "no category"][S.DUR_NS].iloc[0] == 0
    assert coll.empty and steps.empty


def test_gloo_collectives_come_from_backend_ranges_when_nothing_else_names_them(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 5.0, "dur": 60.0,
         "pid": 100, "tid": 100},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 10.0, "dur": 40.0,
         "pid": 100, "tid": 101},
    ]
    path = write_trace(tmp_path / "t.json", trace_doc(events=events))
    _, coll, _ = _three(build_tables(tracefile.load(path)))
    assert coll[S.COLL_NAME].astype(str).tolist() == ["all_reduce"]
    assert coll.iloc[0][S.DUR_NS] == 40_000 and not coll.iloc[0][S.ON_GPU]


def test_an_op_with_shapes_but_no_name_is_read(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1,
         "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 2, "pid": 1, "tid": 1,
         "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}}]}
    ev, _, _ = _three(build_tables(tracefile.load(write_trace(tmp_path / "a.json", doc))))
    assert np.isnan(ev[S.FLOPS].iloc[0])
    assert ev[S.FLOPS].iloc[1] == 2 * 2 * 3 * 4  # 2 FLOPs per multiply-add of a 2x3 @ 3x4


def test_a_missing_name_category_or_shape_is_empty_text(tmp_path):
    """Not "nan" (pandas' factorize gives None back as NaN): an op without Input Dims must
    not read as one whose shapes were recorded (analyzers test the text's truth)."""
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "ts": 1, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "name": "no category", "ts": 3, "dur": 2, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 5, "dur": 2, "pid": 1, "tid": 1,
         "args": {"Input Dims": [[2, 3], [3, 4]]}}]}
    ev, _, _ = _three(build_tables(tracefile.load(write_trace(tmp_path / "a.json", doc))))
    assert ev[S.NAME].astype(str).tolist() == ["", "no category", "aten::mm"]
    assert ev[S.CAT].astype(str).tolist() == ["cpu_op", "", "cpu_op"]
    assert ev[S.INPUT_DIMS].astype(str).tolist() == ["", "", "[[2, 3], [3, 4]]"]
    for column in (S.NAME, S.CAT, S.INPUT_DIMS):
        assert "nan" not in ev[column].cat.categories


def test_kept_collective_args_hold_no_raw_json_of_their_batch():
    """A collective's args are kept past their batch (for the collectives table); their raw
    JSON fields would keep the whole batch's decoded buffer alive, so they are emptied."""
    import json

    from profkit.trace.accumulate import Accumulator
    from profkit.trace.traceevents import BATCH_DECODER

    event = {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 1.0, "dur": 2.0,
             "pid": 1, "tid": 1, "args": {"Collective name": "allreduce", "In msg nelems": 4,
                                          "Input Dims": [[4]], "Input type": ["float"],
                                          "Concrete Inputs": [""], "Input Strides": [[1]]}}
    batch = BATCH_DECODER.decode(json.dumps([event]).encode())
    assert len(batch[0].args.input_dims)  # decoded raw, pointing into the batch's buffer
    acc = Accumulator()
    acc.add(batch)
    kept = acc.coll_args[0]
    assert (kept.collective, kept.in_nelems) == ("allreduce", 4)
    assert [len(getattr(kept, f)) for f in ("input_dims", "input_types", "concrete_inputs",
                                            "input_strides")] == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(3))
def test_the_launching_op_is_pandas_as_of_join(seed):
    """collectives._op_holding (which op a launch call lies in) against pandas' merge_asof
    by thread, backward, then kept where the call ends inside the op: random calls and ops
    with many equal start times (nested ops starting together)."""
    import pandas as pd

    from profkit.nccl.collectives import _op_holding

    rng = np.random.default_rng(seed)
    for _ in range(100):
        n, m = rng.integers(1, 40), rng.integers(1, 40)
        op_ts, op_dur, op_tid = rng.integers(0, 30, m), rng.integers(0, 15, m), rng.integers(0, 3, m)
        ts, tid = rng.integers(0, 40, n), rng.integers(0, 4, n)
        ops = pd.DataFrame({"op_ts": op_ts, "op_end": op_ts + op_dur, "op_tid": op_tid,
                            "op": np.arange(m)})
        calls = pd.DataFrame({"ts": ts, "tid": tid, "call": np.arange(n)})
        joined = pd.merge_asof(calls.sort_values("ts"), ops.sort_values("op_ts"), left_on="ts",
                               right_on="op_ts", left_by="tid", right_by="op_tid",
                               direction="backward")
        joined = joined[joined["ts"] <= joined["op_end"]]
        expect = np.full(n, -1)
        expect[joined["call"].to_numpy()] = joined["op"].to_numpy()
        np.testing.assert_array_equal(_op_holding(ts, tid, op_ts, op_dur, op_tid), expect)


@pytest.mark.parametrize("python_strings", [True, False])
@pytest.mark.parametrize("n, share", [(0, 0), (1, 1), (400, 0.1), (400, 0), (60, 1)])
def test_class_columns_are_the_categorical_pandas_makes(n, share, python_strings):
    """The class columns are built from the GPU rows' values ("" on the others); the same
    dtype, categories and codes as ``pd.Categorical`` of the whole column, with pandas'
    strings either way."""
    rng = np.random.default_rng(n)
    values = np.full(n, "", dtype=object)
    rows = rng.random(n) < share
    values[rows] = rng.choice(["b", "a", "", "communication", "é"], int(rows.sum()))
    with strings() if python_strings else contextlib.nullcontext():
        want = pd.Categorical(values)
        got = _categorical(values[rows], np.flatnonzero(rows), n)
    assert got.dtype == want.dtype and got.categories.dtype == want.categories.dtype
    assert got.codes.dtype == want.codes.dtype and got.codes.tolist() == want.codes.tolist()
