"""Setup for new input shapes (analyzers/measure/shapesetup.py, findings/shapesetup.py):
setup calls against their definition in plain Python, on random events and on a real H200
trace read as raw JSON; the finding against profkit's own measured twins (the labels in
samples/runs/memory/SHAPES.txt) and absent on runs whose shapes do not change."""

import statistics
from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.measure.shapesetup import SETUP_MIN_NS, SETUP_RATIO, setup_calls

from profkit import schema as S
from tests.realruns import RUNS, read_doc, sample_labels

NAMES = ["aten::mm", "aten::linear", "aten::_cudnn_attention_forward", "aten::add"]
DIMS = ["[[4, 8], [8, 8]]", "[[16, 8], [8, 8]]", "[[32, 8]]", "[[]]", ""]
VARLEN = RUNS / "memory" / "varlen_default"


def _events(rows) -> pd.DataFrame:
    kind, name, dims, tid, ts, dur, step = zip(*rows)
    return pd.DataFrame({S.KIND: pd.Categorical(kind, categories=S.KINDS),
                         S.NAME: pd.Categorical(name, categories=NAMES),
                         S.INPUT_DIMS: pd.Categorical(dims, categories=DIMS),
                         S.TID: np.array(tid, np.int64), S.TS_NS: np.array(ts, np.int64),
                         S.DUR_NS: np.array(dur, np.int64), S.STEP: np.array(step, np.int64)})


def _plain_setup(rows) -> set:
    """The rows (by index) that are innermost setup calls, by the module's definition."""
    calls = defaultdict(list)
    for i, (kind, name, dims, tid, ts, dur, _) in enumerate(rows):
        if kind == S.KIND_CPU_OP and any(c.isdigit() for c in dims):
            calls[(tid, name, dims)].append((ts, dur, i))
    setup = set()
    for found in calls.values():
        found.sort()
        if len(found) < 2:
            continue
        first, repeat = found[0][1], statistics.median(d for _, d, _ in found[1:])
        if first - repeat >= SETUP_MIN_NS and first >= SETUP_RATIO * repeat:
            setup.add(found[0][2])
    span = {i: (rows[i][3], rows[i][4], rows[i][4] + rows[i][5]) for i in setup}
    return {i for i in setup if not any(
        j != i and span[j][0] == span[i][0] and span[j][1] >= span[i][1]
        and span[j][2] <= span[i][2] for j in setup)}


@pytest.mark.parametrize("seed", range(6))
def test_setup_calls_are_the_innermost_slow_first_calls_of_a_shape(seed):
    rng = np.random.default_rng(seed)
    rows, n = [], 400
    times = rng.permutation(n) * 3_000_000  # distinct starts, far enough apart to nest below
    for i in range(n):
        slow = rng.random() < 0.25
        dur = int(rng.integers(500_000, 30_000_000)) if slow else int(rng.integers(1, 300_000))
        rows.append((rng.choice([S.KIND_CPU_OP, S.KIND_CPU_OP, S.KIND_RUNTIME]),
                     str(rng.choice(NAMES)), str(rng.choice(DIMS)), int(rng.choice([7, 9])),
                     int(times[i]), 2 * (dur // 2), int(rng.integers(0, 4))))
    # nested slow calls: an inner one inside some outer ones, on the same thread
    for k in range(8):
        outer = rows[k]
        rows.append((S.KIND_CPU_OP, "aten::mm", "[[32, 8]]", outer[3], outer[4] + 2,
                     2 * ((outer[5] - 4) // 2), outer[6]))
    ev = _events(rows)
    got = setup_calls(ev)
    assert set(got.index) == _plain_setup(rows)
    assert len(got) >= 2  # the random events do hold setup calls


def test_only_the_innermost_of_nested_setup_calls_counts():
    rows = []
    for call, t in enumerate((0, 100_000_000, 200_000_000)):
        slow = call == 0
        rows += [(S.KIND_CPU_OP, "aten::linear", "[[16, 8], [8, 8]]", 1, t,
                  60_000_000 if slow else 300_000, 0),
                 (S.KIND_CPU_OP, "aten::mm", "[[16, 8], [8, 8]]", 1, t + 1_000,
                  59_000_000 if slow else 200_000, 0)]
    ev = _events(rows)
    got = setup_calls(ev)
    assert got[S.NAME].astype(str).tolist() == ["aten::mm"]
    assert got["repeat_ns"].tolist() == [200_000]
    moved = setup_calls(ev.set_axis(range(100, 100 + len(ev))))  # an index not its positions
    assert moved["repeat_ns"].tolist() == [200_000] and list(moved.index) == [101]


def test_a_real_trace_cudnn_attention_plans_from_the_raw_json():
    """varlen_default (1 x H200, a new sequence length each step): per used step, cuDNN's
    attention forward is a setup call, and the analysis' table gives what the raw JSON
    gives: the median of the first calls and of the repeats."""
    analysis = analyze_run(VARLEN, cache=False)
    steps = analysis.table("step_breakdown")
    used = set(steps.loc[steps["used"].astype(bool), "step"].tolist())
    (trace,) = (VARLEN / "traces").glob("*.json*")
    doc = read_doc(trace)
    marks = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                   for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#"))
    by_dims = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::_cudnn_attention_forward":
            by_dims[str(e["args"]["Input Dims"])].append((e["ts"], e["dur"]))
    firsts, repeats = [], []
    for calls in by_dims.values():
        calls.sort()
        (ts, dur), rest = calls[0], [d for _, d in calls[1:]]
        step = next(s for lo, hi, s in marks if lo <= ts < hi)
        assert dur >= SETUP_RATIO * statistics.median(rest) and dur - statistics.median(rest) > 1e3
        if step in used:
            firsts.append(dur)
            repeats.append(statistics.median(rest))
    row = analysis.table("shape_setup").set_index("name").loc["aten::_cudnn_attention_forward"]
    assert row["calls"] == len(firsts) == len(used) >= 4
    assert abs(row["first_ns"] - statistics.median(firsts) * 1e3) <= 1e3  # us in the JSON
    assert abs(row["repeat_ns"] - statistics.median(repeats) * 1e3) <= 1e3


def test_the_finding_advises_fewer_shapes_and_its_saving_matches_the_measured_twin():
    """On varlen_default the launch-overhead finding is the shapes' setup: advice to bucket
    the lengths (and FlashAttention, the calls being cuDNN's), not CUDA graphs; its saving is
    within 0.15 of the step of what bucketing saved on profkit's measured twins (the
    workloads' own step times, SHAPES.txt: cuDNN as PyTorch chose it, against lengths padded
    to multiples of 512)."""
    analysis = analyze_run(VARLEN, cache=False)
    (f,) = [f for f in analysis.findings if "setup_idle_ms_per_step" in f.evidence]
    assert f.category == "cpu_launch" and f.rank == 0
    assert f.recommendation.startswith("Pad the inputs to a few fixed shapes")
    assert "FLASH_ATTENTION" in f.recommendation and "Cut launch overhead" not in f.recommendation
    assert "aten::_cudnn_attention_backward" in f.message
    launch = analysis.table("rank_breakdown").set_index("rank").loc[0, "cpu_launch"]
    assert f.estimated_saving["fraction"] <= launch + 1e-9
    labels = sample_labels(RUNS / "memory" / "SHAPES.txt")
    base = statistics.median(labels["memory_varlen_cudnn"]["step_ms"][1:])
    fixed = statistics.median(labels["memory_varlen_bucket512"]["step_ms"][1:])
    assert abs(f.estimated_saving["fraction"] - (1 - fixed / base)) < 0.15


@pytest.mark.parametrize("run", ["memory/empty_cache", "memory/gpt_b32", "zoo/compute",
                                 "stock_ddp"])
def test_no_setup_finding_where_shapes_do_not_change(run):
    analysis = analyze_run(RUNS / run, cache=False)
    assert not [f for f in analysis.findings if "setup_idle_ms_per_step" in f.evidence]
    assert analysis.table("shape_setup").empty or \
        analysis.table("shape_setup")["rank_steps"].max() < 2


def _host(category: str, ms: float, step_ms: float = 100.0):
    from profkit.analyzers.result import Finding

    return Finding(category, "warning", f"rank 0: {category}", "Cut launch overhead: CUDA graphs.",
                   {"fraction": ms / step_ms}, rank=0).with_saving(ms, ms / step_ms)


def _table(cpu_launch_ms: float, name: str = "aten::mm", first_ms: float = 5.0,
           rank_steps: int = 4, used: int = 4) -> pd.DataFrame:
    ns = int(cpu_launch_ms * 1e6 * used)
    return pd.DataFrame([dict(rank=0, name=name, calls=used, steps=rank_steps,
                              rank_steps=rank_steps, setup_ns=ns, idle_ns=ns, cpu_launch_ns=ns,
                              host_work_ns=0, first_ns=int(first_ms * 1e6), repeat_ns=50_000,
                              dims="[[8, 8]]")])


def _judge(findings, table, used=4, benchmark=None):
    from profkit.analyzers.findings.shapesetup import shape_setup_host

    means = pd.DataFrame({"step_ns": [100e6]}, index=pd.Index([0], name="rank"))
    return shape_setup_host(findings, table, means, {0: used}, {0: 100.0}, benchmark)


@pytest.mark.parametrize("setup_ms, launch_ms, work_ms, folded", [
    (60.0, 70.0, 10.0, True),    # most of the host wait and 60% of the step: the cause
    (30.0, 70.0, 10.0, False),   # under half of the host wait: named only
    (25.0, 30.0, 0.0, False),    # most of the wait but 25% of the step: padding may cost more
])
def test_the_setup_is_the_cause_only_when_most_of_the_wait_and_of_the_step(
        setup_ms, launch_ms, work_ms, folded):
    findings = [_host("cpu_launch", launch_ms)] + ([_host("host_work", work_ms)] if work_ms else [])
    out = _judge(findings, _table(setup_ms))
    if folded:
        (f,) = out
        assert f.category == "cpu_launch" and f.recommendation.startswith("Pad the inputs")
        assert "CUDA graphs and torch.compile(mode='reduce-overhead') need fixed" in f.recommendation
        assert f.estimated_saving == {"ms_per_step": setup_ms, "fraction": setup_ms / 100}
        assert set(f.evidence["folded"]) == {"host_work"}
    else:
        assert [g.category for g in out] == [g.category for g in findings]
        f = out[0]
        assert f.recommendation.startswith("Cut launch overhead") and "paid once per shape" in \
            f.recommendation
        assert f.estimated_saving == findings[0].estimated_saving
        assert f"{setup_ms:.1f} ms per step of it inside ops setting up" in f.message


def test_no_setup_named_when_few_steps_bring_new_shapes_or_it_is_small():
    findings = [_host("cpu_launch", 70.0)]
    assert _judge(findings, _table(60.0, rank_steps=1)) == findings  # one step of four
    assert _judge(findings, _table(4.0)) == findings  # 4% of the step


@pytest.mark.parametrize("name, first_ms, benchmark", [
    ("aten::cudnn_convolution", 48.0, True), ("aten::cudnn_convolution", 3.5, False),
    ("aten::mm", 48.0, False)])
def test_cudnn_benchmark_is_named_only_for_convolutions_that_take_long_on_a_new_shape(
        name, first_ms, benchmark):
    (f,) = _judge([_host("cpu_launch", 70.0)], _table(60.0, name=name, first_ms=first_ms))
    assert ("cudnn.benchmark = True" in f.recommendation) == benchmark
    assert ("CNN sample" in f.recommendation) == ("convolution" in name)


@pytest.mark.parametrize("recorded, first_ms, named", [
    (True, 3.5, True), (False, 48.0, False), (None, 48.0, True), (None, 3.5, False)])
def test_cudnn_benchmark_as_run_json_records_it_else_by_the_first_calls(recorded, first_ms,
                                                                         named):
    (f,) = _judge([_host("cpu_launch", 70.0)],
                  _table(60.0, name="aten::cudnn_convolution", first_ms=first_ms),
                  benchmark=recorded)
    assert ("cudnn.benchmark = True" in f.recommendation) == named
