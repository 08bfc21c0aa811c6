"""The findings of each measurement: one judge per kind of measured
:class:`~profkit.analyzers.result.Result` (named by its ``facts["topic"]``).

The analysis judges through :data:`profkit.analyzers.measurements.MEASUREMENTS`, whose
entries name their judges; this table serves judging one result on its own (:func:`judged`)
here in the findings layer, which may not read the registry. tests/analyzers/test_registry.py
keeps the two alike: a new measurement's judge goes in both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from profkit.analyzers.findings.allocations import allocation_findings
from profkit.analyzers.findings.attention import attention_findings
from profkit.analyzers.findings.comms import (
    collective_findings,
    group_findings,
    link_findings,
    straggler_findings,
)
from profkit.analyzers.findings.efficiency import judge_efficiency
from profkit.analyzers.findings.experts import expert_findings
from profkit.analyzers.findings.fp8 import fp8_findings
from profkit.analyzers.findings.inference import inference_findings
from profkit.analyzers.findings.kernels import kernel_findings, no_gpu_findings
from profkit.analyzers.findings.memoryrisks import allocator_findings
from profkit.analyzers.findings.ncu import ncu_findings
from profkit.analyzers.findings.pipeline import pipeline_findings
from profkit.analyzers.findings.recompute import recompute_findings
from profkit.analyzers.findings.roofline import roofline_findings
from profkit.analyzers.findings.sharding import fsdp_findings
from profkit.analyzers.findings.tensor_parallel import tp_findings
from profkit.analyzers.result import Finding, Result
from profkit.analyzers.thresholds import DEFAULT, Thresholds

JUDGES: dict[str, Callable[[Result, Thresholds], list[Finding]]] = {
    "collectives": collective_findings, "stragglers": straggler_findings,
    "links": link_findings, "groups": group_findings, "kernels": kernel_findings,
    "efficiency": judge_efficiency, "no_gpu": no_gpu_findings, "roofline": roofline_findings,
    "ncu": ncu_findings, "allocations": allocation_findings,
    "experts": expert_findings, "fsdp": fsdp_findings, "tensor_parallel": tp_findings,
    "allocator": allocator_findings, "recompute": recompute_findings, "fp8": fp8_findings,
    "pipeline": pipeline_findings, "inference": inference_findings,
    "attention": attention_findings,
}


def measurement_findings(result: Result, th: Thresholds | None = None) -> list[Finding]:
    """The findings ``result`` supports (none for a measurement nothing is judged on), judged
    with ``th``, else with the thresholds the measurement was made with."""
    judge = JUDGES.get(result.facts.get("topic", ""))
    if judge is None:
        return []
    return judge(result, th if th is not None else result.facts.get("thresholds", DEFAULT))


def judged(result: Result, th: Thresholds | None = None) -> Result:
    """``result`` with its findings (see :func:`measurement_findings`)."""
    return replace(result, findings=measurement_findings(result, th))
