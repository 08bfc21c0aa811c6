"""Evidence that reads: a few numbers with units per finding in text and Markdown (ms, %,
GB/s, TFLOP/s), never a raw ``5.105e+06`` or a 2 KB line of template names; JSON keeps every
key."""

from __future__ import annotations

import math
import re

import pytest
from profkit.analyzers import units as U
from profkit.analyzers.report.evidence import MAX_CHARS, evidence_text
from profkit.analyzers.report.render import to_json, to_markdown, to_text
from profkit.analyzers.report.render_text import finding_evidence, grouped_findings

from tests.analysed import analysed
from tests.conftest import CORPUS, REPO

RUNS = REPO / "samples" / "runs"
PUBLIC = REPO / "tests" / "data" / "public"
RAW_FLOAT = re.compile(r"\d\.?\d*e[+-]\d")  # 5.105e+06, 3.8e-06


def test_units_by_hand():
    assert U.ms(1.4676) == "1.47 ms" and U.ms(123.4) == "123 ms" and U.ms(0.0453) == "45.3 us"
    assert U.ms_of_ns(5_104_546.7, "step") == "5.1 ms/step"
    assert [U.pct(f) for f in (0.1409, 0.0917, 0.9947, 0.0003, 1.0)] == \
        ["14%", "9.2%", "99.5%", "<0.1%", "100%"]
    assert [U.size(b) for b in (33_554_432, 216, 4.5e9)] == ["33.6 MB", "216 B", "4.5 GB"]
    assert U.gbps(212.52) == "213 GB/s" and U.gbps(15.552) == "15.6 GB/s"
    assert U.tflops(444.43) == "444 TFLOP/s" and U.tflops(0.00418) == "4.18 GFLOP/s"
    assert U.by_key("others_wait_ns_per_step", 5.1e6) == "5.1 ms/step"
    assert U.by_key("peak_mem_bytes", 4.5e9) == "4.5 GB" and U.by_key("wait_frac", 0.5) == "50%"
    assert U.pct(math.nan) == U.MISSING and U.ms(None) == U.MISSING


def test_a_category_without_a_list_gets_a_short_generic_line():
    evidence = {"wait_ns": 2_500_000, "share": 0.25, "nested": {"a": 1}, "label": "x" * 300,
                "extra": 1}
    assert evidence_text("something_new", evidence) == \
        f"wait ns 2.5 ms, share 25%, label {'x' * 51}..."


def test_items_worth_saying_only_when_not_zero():
    evidence = {"fraction": 0.39, "step_time_ms": 4.2, "ms_per_step": 1.64,
                "after_sync_share": 0.0, "launch": {"launch_calls": 2004, "launch_median_ns": 1300}}
    assert evidence_text("cpu_launch", evidence) == \
        "1.64 ms/step (39% of a 4.2 ms step), 2004 launch calls, median 1.3 us"
    evidence["after_sync_share"] = 0.5
    assert "50% of it right after a blocking sync" in evidence_text("cpu_launch", evidence)


@pytest.fixture(scope="module")
def straggler():
    return analysed(RUNS / "zoo" / "straggler")


def test_the_straggler_evidence_reads_in_ms(straggler):
    # independent: the exposed wait rank 0 (the waiting rank) has per step, from rank_waits
    waits = straggler.table("rank_waits").set_index("rank")
    assert round(waits.loc[0, "exposed_wait_ns_per_step"] / 1e6, 2) == 1.47
    [found] = [f for f in straggler.findings if f.category == "straggler"]
    evidence = evidence_text("straggler", found.evidence)  # as the dashboard shows it
    assert evidence.startswith("others wait 1.47 ms/step (14% of their step)")
    assert "last at 18 of 18 collectives" in evidence
    assert not RAW_FLOAT.search(evidence) and "_ns" not in evidence
    # the text and Markdown reports say these facts once: in the finding's message
    for report in (to_text(straggler), to_markdown(straggler)):
        assert "others wait 1.47 ms/step" not in report
        assert "1.47 ms per step (14% of their 10.41 ms step)" in " ".join(report.split())
    # JSON keeps the raw numbers
    [finding] = [f for f in to_json(straggler)["findings"] if f["category"] == "straggler"]
    assert finding["evidence"]["others_exposed_wait_ns_per_step"] == \
        waits.loc[0, "exposed_wait_ns_per_step"]


REAL = [RUNS / "zoo" / "straggler", RUNS / "zoo" / "cpu_launch", RUNS / "zoo" / "data_loading",
        RUNS / "diagnosis" / "transfer_pageable", RUNS / "profkit_fsdp",
        PUBLIC / "param_dlrm_8rank", PUBLIC / "amd_mi210_gpu_only", PUBLIC / "resnet50_nw0",
        PUBLIC / "hta_cupti_range", CORPUS / "hta" / "negative_queue_length_values_check",
        CORPUS / "hta" / "trace_diff" / "test"]


@pytest.mark.parametrize("folder", REAL, ids=lambda p: p.name)
def test_evidence_lines_are_short_and_in_units(folder):
    if not folder.exists():
        pytest.skip(f"{folder} not found")
    a = analysed(folder)
    lines = [ln.strip() for ln in to_text(a).splitlines()]
    evidence = [ln for ln in lines if ln.startswith("evidence:")]
    grouped = [f for f, _ in grouped_findings(a)]
    listed = [f for f in grouped if f.severity != "info"] or grouped[:3]  # as the report does
    shown = [f for f in listed if f.evidence and finding_evidence(f)]
    assert evidence or not shown
    for line in evidence:
        assert len(line) <= len("evidence: ") + MAX_CHARS, line
        assert not RAW_FLOAT.search(line) and "=" not in line, line  # no key=value dumps
        assert not re.search(r"void |at::native|anonymous namespace", line), line
    # the fusion message names kernels the short way too
    assert all(len(ln) < 400 for ln in lines if "repeat in fixed sequences" in ln)


def test_counts_in_findings_read_as_words():
    assert evidence_text("runtime_calls", {"slow_runtime_calls": 1, "slow_runtime_ns": 2e6,
                                           "slow_frac": 0.1}) == "1 slow call, 2 ms (10% of the step)"
    assert evidence_text("runtime_calls", {"slow_runtime_calls": 3, "slow_runtime_ns": 2e6,
                                           "slow_frac": 0.1}).startswith("3 slow calls, ")
    a = analysed(RUNS / "why" / "eltwise_chain")
    messages = [f.message for f in a.findings if f.category == "mfu"]
    assert messages and all("rank(s)" not in m for m in messages)
    assert any(m.startswith("MFU not computed on rank 0: ") for m in messages)
