"""The Overview's straggler box says what the straggler finding says: its p-value and, when
the late arrivals could be chance, that the evidence is weak (issue 42, item 3)."""

from dataclasses import replace
from pathlib import Path

from profkit.analyzers.executor import analyze_run
from profkit.analyzers.thresholds import DEFAULT
from profkit.dashboard.pages.overview import straggler_card

RUN = Path(__file__).resolve().parents[2] / "samples" / "runs" / "zoo" / "straggler"


def _text(node) -> str:
    if isinstance(node, str):
        return node
    kids = getattr(node, "children", None)
    kids = kids if isinstance(kids, list) else [kids] if kids is not None else []
    return " ".join(_text(k) for k in kids)


def test_a_weak_straggler_keeps_its_weak_evidence_in_the_box():
    """zoo/straggler: rank 1 last at 18 of 18 collectives (p=3.8e-06). Against a bar stricter
    than that p the finding calls it weak evidence; the box said only "arrived last at
    18/18 collectives" before."""
    a = analyze_run(RUN, thresholds=replace(DEFAULT, straggler_max_p_value=1e-30),
                    cache=False, workers=1)
    box = _text(straggler_card(a))
    assert "p=3.8e-06: weak evidence, could be chance" in box
    finding = next(f for f in a.findings if f.category == "straggler")
    assert f"{finding.estimated_saving['ms_per_step']:.2f} ms/step" in box
