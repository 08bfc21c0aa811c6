"""The part table (analyzers/parts.py) is the one place a step part is declared: every row
is complete, and a row added to it (with its charging rule and its threshold) reaches every
output without another edit."""

import json
import re
from dataclasses import dataclass, fields

import pytest
from profkit.analyzers import parts as P
from profkit.analyzers.analyze import analyze
from profkit.analyzers.findings.savings import SAVING_RULES
from profkit.analyzers.measure import breakdown
from profkit.analyzers.measure.charge import EMPTY
from profkit.analyzers.report.html import analysis_html
from profkit.analyzers.report.render import to_json, to_text
from profkit.analyzers.thresholds import DEFAULT, Thresholds

from profkit.run.loader import load_run
from tests.factories import kernel, launch, step, trace_doc, write_trace

COLOUR = re.compile(r"#[0-9a-fA-F]{6}")


def test_every_part_has_a_threshold_that_exists_colours_and_advice():
    for p in P.PART_TABLE:
        assert COLOUR.fullmatch(p.color) and COLOUR.fullmatch(p.notebook_color), p.key
        assert p.name.split(" (")[0] == p.label, p.key  # the legend reads the rest
        if p.threshold:
            assert isinstance(getattr(DEFAULT, p.threshold), float), p.key
            assert p.meaning and p.advice and p.finding, p.key
        else:
            assert not (p.meaning or p.advice), p.key  # advice no finding would ever give
    # compute is judged by the efficiency findings, the pipeline bubble by the pipeline
    # measurement (findings/pipeline.py); any other part left without a threshold would
    # never be a finding
    assert [p.key for p in P.PART_TABLE if not p.threshold] == ["compute", "pipeline_bubble"]
    orders = [p.finding_order for p in P.PART_TABLE if p.threshold]
    assert len(set(orders)) == len(orders)


def test_every_saving_rule_a_part_names_is_a_rule_of_savings():
    assert {p.saving for p in P.PART_TABLE if p.saving} <= set(SAVING_RULES)
    assert set(P.SAVING_PARTS) == {p.key for p in P.PART_TABLE if p.saving}


def test_the_derived_names_are_the_tables_and_keep_their_old_homes():
    from profkit.analyzers.analyze import PART_NAMES, part_label, part_name
    from profkit.analyzers.findings.consolidate import HOST_IDLE_PARTS
    from profkit.analyzers.findings.diagnosis import HOST_PARTS
    from profkit.analyzers.measure.breakdown import HOST_SIDE, PARTS, VERDICT_CLASSES
    from profkit.analyzers.measure.charge import PARTS as CHARGED

    keys = tuple(p.key for p in P.PART_TABLE)
    assert PARTS == CHARGED == VERDICT_CLASSES == keys
    assert HOST_SIDE == ("cpu_launch", "host_work")
    assert set(HOST_SIDE) <= set(HOST_IDLE_PARTS) == set(HOST_PARTS)
    assert HOST_IDLE_PARTS == ("cpu_launch", "host_work", "data_loading", "host_sync")
    assert part_name("memcpy") == PART_NAMES["memcpy"] == "transfer"
    assert part_label("idle_other") == "held work" and part_name("memset") == "memset"
    assert P.BY_KEY["memcpy"].finding == "memory transfer"
    assert list(P.PART_COLORS) == list(keys)


# A part as a contributor would add it: one row, a threshold, a charging rule.
BUBBLE = P.Part("stage_wait", "stage wait",
                "stage wait (a stage waits for its neighbour)", "stage wait",
                "#123456", "#654321", threshold="stage_wait_frac",
                meaning="a pipeline stage waits for its neighbour",
                advice="Interleave more micro-batches per stage.", saving="idle_time",
                finding_order=7)


@dataclass(frozen=True, kw_only=True)
class BubbleThresholds(Thresholds):
    stage_wait_frac: float = 0.05


def held_steps(n: int = 4) -> list[dict]:
    """``n`` steps of 1000 us: kernel A 20-400 (launched at 10), then kernel B 600-1000,
    launched at 30, before the gap 400-600 began: per step compute 780 us, launch overhead
    20 us (0-20) and 200 us of held work, which the charging rule below makes the bubble."""
    events = []
    for i in range(n):
        t = 1000.0 * i
        events += [step(i, t, 1000.0), launch(t + 10, 2.0, 2 * i + 1),
                   kernel("sm90_xmma_gemm_bf16", t + 20, 380.0, 2 * i + 1),
                   launch(t + 30, 2.0, 2 * i + 2),
                   kernel("sm90_xmma_gemm_bf16", t + 600, 400.0, 2 * i + 2)]
    return events


@pytest.fixture
def with_bubble(monkeypatch):
    """The table with BUBBLE added, and charge's rule giving it the held work (for this
    test only: monkeypatch puts both back)."""
    charged = breakdown.charged_intervals

    def charge(*args, **kwargs):
        out = charged(*args, **kwargs)
        out["stage_wait"], out["idle_other"] = out["idle_other"], EMPTY
        return out

    monkeypatch.setattr(P, "PART_TABLE", (*P.PART_TABLE, BUBBLE))
    monkeypatch.setattr(breakdown, "charged_intervals", charge)


def test_a_part_added_to_the_table_reaches_every_output(tmp_path, with_bubble):
    path = write_trace(tmp_path / "rank0.json",
                       trace_doc(rank=0, world_size=1, events=held_steps()))
    run = load_run(path, cache=False)
    steps = breakdown.rank_steps(run.ranks[0])
    assert (steps["stage_wait"] == 200_000).all() and (steps["idle_other"] == 0).all()
    a = analyze(run, BubbleThresholds())
    assert a.table("rank_breakdown").loc[0, "stage_wait"] == pytest.approx(0.2)
    assert a.verdict["fractions"]["stage_wait"] == pytest.approx(0.2)

    doc = json.loads(json.dumps(to_json(a)))
    assert doc["ranks"][0]["breakdown"]["stage_wait"] == pytest.approx(0.2)
    found = [f for f in doc["findings"] if f["category"] == "stage_wait"]
    assert [f["message"] for f in found] == [
        "rank 0: 20% of step time is stage wait (a pipeline stage waits for its "
        "neighbour)"]
    assert found[0]["recommendation"] == BUBBLE.advice
    assert found[0]["evidence"]["threshold"] == 0.05
    assert found[0]["estimated_saving"]["ms_per_step"] == pytest.approx(0.2)

    text = to_text(a, width=200)
    header = next(line for line in text.splitlines() if line.lstrip().startswith("rank  step"))
    assert header.split()[-3:] == ["stage", "wait", "primary"]  # the rank table's column
    assert "stage wait: a stage waits for its neighbour" in text  # the legend
    assert "of step time is stage wait" in text and "could save ~0.20 ms/step" in text
    assert "threshold 5.0%" in text  # its evidence, as any part's
    assert P.PART_COLORS["stage_wait"] == "#123456"
    assert P.part_label("stage_wait") == "stage wait"
    assert "#654321" in analysis_html(a)


def test_a_finding_part_without_its_threshold_fails_loudly(with_bubble):
    from profkit.analyzers.findings.advice import breakdown_findings

    ranks = breakdown.pd.DataFrame([{"rank": 0, "step_time_ms": 1.0, "compute": 0.5,
                                     **{p: 0.0 for p in P.PARTS if p != "compute"}}])
    with pytest.raises(AttributeError, match="stage_wait_frac"):
        breakdown_findings(ranks, DEFAULT)


def test_the_part_fields_are_documented():
    doc = P.Part.__doc__ or ""
    assert all(f"{f.name}:" in doc for f in fields(P.Part))
