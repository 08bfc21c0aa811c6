"""bench/independent_check.py on hand-built traces whose numbers are worked out by hand below.

Timeline of `_trace()` (microseconds; CPU threads pid 1 / tid 1 and 2, GPU pid 0):

    steps        ProfilerStep#1 [0,100)   ProfilerStep#2 [100,200)
    CPU          DataLoader __next__ [5,35) holding aten::copy_ [10,20)
                 cudaMemcpyAsync [36,40)  cudaLaunchKernel [45,50) [60,62)
                 aten::mm [118,136) holding cudaLaunchKernel [120,123) (its kernel is missing)
                 cudaStreamSynchronize [140,148); on tid 2 only cuLaunchKernel [130,135)
    GPU          memcpy HtoD pageable [40,50)  gemm [50,80)  nccl all-reduce [70,90)
                 triton [150,160)  memset [170,175)  memcpy DtoH pinned [185,195)

GPU busy union: [40,90) + [150,160) + [170,175) + [185,195) = 50 + 10 + 5 + 10 = 75 us.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("independent_check",
                                               REPO / "bench" / "independent_check.py")
ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ic)

US = 1000  # ns per microsecond
CPU, CPU2, GPU = {"pid": 1, "tid": 1}, {"pid": 1, "tid": 2}, {"pid": 0, "tid": 7}
DATALOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _x(cat, name, ts, dur, where, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, **where, "args": args}


def _trace() -> dict:
    rt, k = "cuda_runtime", "kernel"
    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100, CPU),
        _x("user_annotation", "ProfilerStep#2", 100, 100, CPU),
        # The GPU-side copy of a step annotation must not stretch the window.
        _x("gpu_user_annotation", "ProfilerStep#1", 0, 500, GPU),
        _x("user_annotation", DATALOADER, 5, 30, CPU),
        _x("cpu_op", "aten::copy_", 10, 10, CPU, **{"Input Dims": [[2, 2], [2, 2]]}),
        _x(rt, "cudaMemcpyAsync", 36, 4, CPU, correlation=1),
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 40, 10, GPU, correlation=1),
        _x(rt, "cudaLaunchKernel", 45, 5, CPU, correlation=2),
        _x(k, "gemm", 50, 30, GPU, correlation=2),
        _x(rt, "cudaLaunchKernel", 60, 2, CPU, correlation=3),
        _x(k, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 70, 20, GPU | {"tid": 8}, correlation=3),
        _x("cpu_op", "aten::mm", 118, 18, CPU),
        _x(rt, "cudaLaunchKernel", 120, 3, CPU, correlation=4),  # its kernel was dropped
        _x("cuda_driver", "cuLaunchKernel", 130, 5, CPU2, correlation=5),
        _x(rt, "cudaStreamSynchronize", 140, 8, CPU, correlation=9),
        _x(k, "triton_poi_fused_0", 150, 10, GPU, correlation=5),
        _x(rt, "cudaMemsetAsync", 165, 2, CPU, correlation=6),
        _x("gpu_memset", "Memset (Device)", 170, 5, GPU, correlation=6),
        _x(rt, "cudaMemcpyAsync", 180, 3, CPU, correlation=7),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 185, 10, GPU, correlation=7),
        _x(rt, "cudaStreamIsCapturing", 196, 1, CPU, correlation=10),
        _x(rt, "cudaStreamBeginCapture", 197, 1, CPU, correlation=11),
        _x(rt, "cudaGraphLaunch", 198, 1, CPU, correlation=12),
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 3, **CPU},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}],
            "distributedInfo": {"rank": 3, "world_size": 4, "backend": "nccl"},
            "traceEvents": events}


@pytest.fixture
def facts(tmp_path):
    path = tmp_path / "rank3.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_trace()).encode()))
    return ic.trace_facts(path, gaps=5)


def test_header_and_category_counts(facts):
    assert (facts["rank"], facts["world_size"], facts["device_names"]) == (3, 4, ["Test GPU"])
    cats = facts["events_by_category"]
    assert cats["cuda_runtime"] == 10 and cats["kernel"] == 3 and cats["gpu_memcpy"] == 2
    assert cats["(none)"] == 1 and cats["cpu_instant_event"] == 1
    assert facts["cpu_ops_with_input_dims"] == 1


def test_gpu_time_window_and_steps(facts):
    assert facts["gpu_time_ns"] == {"kernel": 60 * US, "memcpy": 20 * US, "memset": 5 * US}
    w = facts["window"]
    assert (w["source"], w["start_ns"], w["dur_ns"]) == ("ProfilerStep", 0, 200 * US)
    assert w["gpu_busy_ns"] == 75 * US and w["gpu_busy_fraction"] == 0.375
    assert [(s["name"], s["wall_ns"], s["gpu_busy_ns"]) for s in facts["steps"]] == [
        ("ProfilerStep#1", 100 * US, 50 * US), ("ProfilerStep#2", 100 * US, 25 * US)]


def test_memcpy_direction_and_host_memory(facts):
    share = round(10 / 85, 6)  # each copy is 10 us of 85 us of GPU event time
    by_dir = facts["memcpy"]["by_direction"]
    assert by_dir == {"DtoH": {"count": 1, "time_ns": 10 * US, "share_of_gpu_time": share},
                      "HtoD": {"count": 1, "time_ns": 10 * US, "share_of_gpu_time": share}}
    assert set(facts["memcpy"]["by_host_memory"]) == {"Pageable", "Pinned"}


def test_launches_graph_calls_and_comm(facts):
    la = facts["launches"]
    assert la["launch_calls"] == {"cuLaunchKernel": 1, "cudaLaunchKernel": 3}
    assert (la["launch_calls_total"], la["kernels"], la["launch_calls_without_gpu_event"]) == (
        4, 3, 1)
    assert la["graph_calls"] == {"cudaGraphLaunch": 1, "cudaStreamBeginCapture": 1}
    assert la["graph_capture"] and la["graph_launch"]
    assert facts["communication_kernels"] == [
        {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "count": 1, "time_ns": 20 * US}]


def test_idle_gaps_ranked_with_the_launching_thread(facts):
    gaps = facts["idle_gaps"]
    # Holes in [0,200): [0,40) [90,150) [160,170) [175,185) [195,200).
    assert [(g["start_ns"], g["dur_ns"]) for g in gaps] == [
        (90 * US, 60 * US), (0, 40 * US), (175 * US, 10 * US), (160 * US, 10 * US),
        (195 * US, 5 * US)]
    first, second, last = gaps[0], gaps[1], gaps[-1]
    # The triton kernel after the largest hole was launched from tid 2, busy 5 us of 60.
    assert (first["next_gpu_event"], first["cpu_thread"], first["thread_found_by"]) == (
        "triton_poi_fused_0", "1/2", "correlation")
    assert (first["cpu_innermost_ns"], first["cpu_uncovered_ns"]) == (
        {"cuLaunchKernel": 5 * US}, 55 * US)
    # Before the first copy: DataLoader 5+15, aten::copy_ 10, step 5+1, cudaMemcpyAsync 4 us.
    assert second["cpu_innermost_ns"] == {DATALOADER: 20 * US, "aten::copy_": 10 * US,
                                          "ProfilerStep#1": 6 * US, "cudaMemcpyAsync": 4 * US}
    assert second["cpu_uncovered_ns"] == 0
    assert (last["next_gpu_event"], last["cpu_thread"], last["thread_found_by"]) == (
        None, "1/1", "busiest launching thread")


def test_innermost_activity_over_the_largest_gap():
    cpu = [(ic._ns(e["ts"]), ic._ns(e["ts"]) + ic._ns(e["dur"]), e["name"])
           for e in _trace()["traceEvents"] if e.get("tid") == 1 and e.get("ph") == "X"]
    names, bare = ic.innermost_activity(cpu, 90 * US, 150 * US)
    # On tid 1: [90,100) step 1; [100,118) [136,140) [148,150) step 2; aten::mm [118,120)
    # and [123,136); the launch inside it 3 us; the synchronize 8 us.
    assert names == {"ProfilerStep#1": 10 * US, "ProfilerStep#2": 24 * US, "aten::mm": 15 * US,
                     "cudaLaunchKernel": 3 * US, "cudaStreamSynchronize": 8 * US}
    assert bare == 0
    names, bare = ic.innermost_activity([(10, 20, "a")], 0, 30)
    assert (names, bare) == ({"a": 10}, 20)


def test_times_convert_exactly_to_ns():
    assert ic._ns("1740461679471346.123") == 1740461679471346123
    assert ic._ns(15) == 15000 and ic._ns("2e-3") == 2


def test_legacy_capitalised_categories(tmp_path):
    where = {"pid": 9, "tid": "9"}
    gpu = {"pid": 0, "tid": "stream 7"}
    events = [_x("Operator", "ProfilerStep#5", 0, 50, where),
              _x("Runtime", "cudaMemcpyAsync", 1, 2, where, correlation=1),
              _x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 5, 4, gpu, correlation=1),
              _x("Runtime", "cudaLaunchKernel", 10, 2, where, correlation=2),
              _x("Kernel", "volta_sgemm_64x64_nt", 20, 10, gpu, correlation=2)]
    path = tmp_path / "worker0.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    f = ic.trace_facts(path)
    assert f["gpu_time_ns"]["kernel"] == 10 * US and f["window"]["gpu_busy_ns"] == 14 * US
    assert f["memcpy"]["by_host_memory"]["Pageable"]["time_ns"] == 4 * US
    assert f["launches"]["launch_calls_total"] == 1 and f["steps"][0]["wall_ns"] == 50 * US


def test_bad_files_named_others_still_read(tmp_path, capsys):
    good = tmp_path / "rank0.json"
    good.write_text(json.dumps(_trace()))
    cut = tmp_path / "rank1.json.gz"
    cut.write_bytes(gzip.compress(json.dumps(_trace()).encode())[:200])
    foreign = tmp_path / "rank2.json"
    foreign.write_text(json.dumps({"hello": 1}))
    out = tmp_path / "facts.json"
    assert ic.main([str(good), str(cut), str(foreign), "-o", str(out)]) == 1
    written = json.loads(out.read_text())
    assert [f["file"] for f in written["traces"]] == ["rank0.json"]
    assert [e.split(":")[0] for e in written["errors"]] == [str(cut), str(foreign)]
    assert "no traceEvents" in written["errors"][1]
    assert str(cut) in capsys.readouterr().err


def test_nothing_written_when_no_file_is_readable(tmp_path):
    bad = tmp_path / "rank0.json"
    bad.write_text("{not json")
    out = tmp_path / "facts.json"
    assert ic.main([str(bad), "-o", str(out)]) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


_WEIRD = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8),
                   st.sampled_from(["1e400", "-1e30", "nan", "12.5"]), st.lists(st.integers()),
                   st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
_FIELDS = st.sampled_from(["ts", "dur", "name", "pid", "tid", "cat", "ph", "args"])


@settings(max_examples=150, deadline=None)
@given(damage=st.lists(st.tuples(st.integers(0, 24), _FIELDS, _WEIRD), min_size=1, max_size=4))
def test_damaged_events_give_facts_or_a_named_error(tmp_path_factory, damage):
    doc = _trace()
    for index, field, value in damage:
        doc["traceEvents"][index][field] = value
    path = tmp_path_factory.mktemp("fuzz") / "rank0.json"
    path.write_text(json.dumps(doc))
    try:
        facts = ic.trace_facts(path)
    except ic.TraceError as exc:
        assert str(path) in str(exc)
    else:
        assert facts["window"]["source"]
