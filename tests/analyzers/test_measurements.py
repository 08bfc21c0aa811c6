"""The registry of measurements (analyzers/measurements.py, report/sections.SHOWN): a
measurement registered in one place reaches every output, and a rank's summary carries
nothing the registry does not list."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from profkit.analyzers import measurements, summaries
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measurements import GPU, Measurement
from profkit.analyzers.report import render, sections
from profkit.analyzers.result import Finding, Result

from profkit import datacodec, schema
from profkit.run.loader import load_run

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "runs"
RUN = SAMPLES / "zoo" / "straggler"
COUNTED = "counted_kernels"


def _count(r: measurements.RankInputs) -> int:
    return int((r.data.events[schema.KIND] == schema.KIND_KERNEL).sum())


def _sum(values: dict[int, int], ctx: measurements.Combining) -> Result:
    table = pd.DataFrame({"rank": list(values), "kernels": list(values.values())})
    return Result(tables={COUNTED: table},
                  facts={"topic": COUNTED, "total": int(table["kernels"].sum())})


def _judge(result: Result, th) -> list[Finding]:
    return [Finding(category=COUNTED, severity="warning",
                    message=f"{result.facts['total']} kernels counted over the ranks.",
                    recommendation="Count them again.")]


def _section(a) -> sections.Section:
    return sections.Section("Kernels counted", a.table(COUNTED).astype(str))


@pytest.fixture
def registered(monkeypatch):
    """A dummy measurement (kernels counted per rank, summed, judged, shown) registered
    for the test only: one registry line and one report line."""
    dummy = Measurement(COUNTED, _count, GPU, combine=_sum, judge=_judge)
    monkeypatch.setattr(measurements, "MEASUREMENTS", (*measurements.MEASUREMENTS, dummy))
    monkeypatch.setattr(sections, "SHOWN", (*sections.SHOWN, sections.Shown(
        COUNTED, _section, COUNTED, lambda a: a.table(COUNTED).to_dict("records"))))


@pytest.fixture(scope="module")
def run():
    return load_run(RUN)


def test_a_registered_measurement_reaches_every_output(registered, run):
    expected = {r: int((d.events[schema.KIND] == schema.KIND_KERNEL).sum())
                for r, d in run.ranks.items()}
    assert all(expected.values())
    summary = summaries.summarize_rank(run.ranks[0], run.meta)
    assert summary.values[COUNTED] == expected[0]

    a = analyze(run)
    table = a.table(COUNTED)
    assert dict(zip(table["rank"], table["kernels"])) == expected
    total = sum(expected.values())
    message = f"{total} kernels counted over the ranks."
    assert [f.message for f in a.findings if f.category == COUNTED] == [message]

    text = render.to_text(a, width=120)
    assert "Kernels counted:" in text and message in text
    doc = render.to_json(a)
    assert list(doc)[-1] == COUNTED  # after the registered measurements' rows
    assert {r["rank"]: r["kernels"] for r in doc[COUNTED]} == expected
    assert message in [f["message"] for f in doc["findings"]]


def test_without_registration_nothing_of_it_shows(run):
    a = analyze(run)
    assert COUNTED not in a.tables and COUNTED not in render.to_json(a)
    assert "Kernels counted" not in render.to_text(a)


def _registered_values() -> set[str]:
    return {m.name for m in measurements.MEASUREMENTS if m.per_rank is not None}


@pytest.mark.parametrize("has_gpu", [True, False])
def test_a_summary_carries_only_registered_measurements(run, has_gpu):
    for data in run.ranks.values():
        if not has_gpu:  # the rank's CPU side alone: a rank without GPU events
            data = dataclasses.replace(data, events=data.events[
                ~data.events[schema.KIND].isin(schema.GPU_KINDS)].reset_index(drop=True))
        s = summaries.summarize_rank(data, run.meta)
        assert s.has_gpu is has_gpu
        assert list(s.values) == [m.name for m in measurements.MEASUREMENTS
                                  if m.per_rank is not None]
        ran = {n for n, v in s.values.items() if v is not None}
        assert ("kernels" in ran, "cpu_ops" in ran) == (has_gpu, not has_gpu)
        back = datacodec.decode(datacodec.encode(s))
        assert list(back.values) == list(s.values) and back.step_stats == s.step_stats
    fields = {f.name for f in dataclasses.fields(summaries.RankSummary)}
    assert fields == {"rank", "meta", "rank_source", "has_gpu", "values"}


def test_the_old_summary_attributes_read_registered_values():
    props = {n: p for n, p in vars(summaries.RankSummary).items() if isinstance(p, property)}
    s = summaries.RankSummary(0, {}, "", True, {n: object() for n in _registered_values()})
    by_value = {id(v): n for n, v in s.values.items()}
    read = {n: by_value[id(getattr(s, n))] for n in props}
    assert read == {"breakdown": "breakdown", "collectives": "collectives",
                    "step_stats": "stragglers", "kernels": "kernels",
                    "efficiency": "efficiency", "transfers": "transfers", "cpu_ops": "cpu_ops",
                    "roofline": "roofline"}


def test_every_report_line_shows_a_registered_measurement():
    names = {m.name for m in measurements.MEASUREMENTS}
    assert {s.measurement for s in sections.SHOWN} <= names
    assert [s.json_key for s in sections.SHOWN if s.json_rows] == [
        "inference", "top_kernels", "roofline", "ncu_kernels", "efficiency", "recompute",
        "comm_dimensions", "parallel_layout", "zero3", "pipeline", "memory", "memory_live"]


def _noop(values, ctx):
    return Result()


@pytest.mark.parametrize("registry, why", [
    ((Measurement("a", combine=_noop), Measurement("a")), "registered twice"),
    ((Measurement("a", combine=_noop, needs=("b",)),), "not registered"),
    ((Measurement("a", lambda r: 1, needs=("b",)), Measurement("b", lambda r: 2)),
     "registered after it"),
    ((Measurement("a", combine=_noop, needs=("b",)),
      Measurement("b", combine=_noop, needs=("a",))), "need each other"),
])
def test_a_registry_the_loops_cannot_run_is_refused(registry, why):
    with pytest.raises(ValueError, match=why):
        measurements.check(registry)


def test_combines_run_after_what_they_need_and_report_in_registry_order():
    ran = []

    def step(name):
        def combine(values, ctx):
            ran.append(name)
            return Result(facts={"seen": sorted(ctx.results)})
        return combine

    registry = (Measurement("late", combine=step("late"), needs=("early",)),
                Measurement("early", combine=step("early")))
    ctx = measurements.Combining(header=None, metas={}, thresholds=None)
    results = measurements.combine_all([], ctx, registry)
    assert ran == ["early", "late"] and list(results) == ["late", "early"]
    assert results["late"].facts["seen"] == ["early"]


def test_a_gpu_measurement_of_a_run_without_gpu_events_says_so():
    """Any entry's result of topic no_gpu (kernels, efficiency) gets the one coverage
    finding, not its own judge (which would look for its tables); no topic: no findings."""
    from profkit.analyzers.thresholds import DEFAULT

    results = {"links": Result(), "efficiency": Result(
        facts={"topic": measurements.NO_GPU, "what": "efficiency analysis"})}
    found = measurements.judge_all(results, DEFAULT)
    assert [(f.category, f.message) for f in found] == [
        ("coverage", "No GPU events in this run: efficiency analysis skipped.")]


def test_the_findings_layers_table_of_judges_is_the_registrys():
    from profkit.analyzers.findings import judge

    assert judge.JUDGES == {**measurements.judges(), measurements.NO_GPU: judge.no_gpu_findings}
