"""A rank's host-side findings (launch overhead, host work: :data:`HOST_SIDE`) made one
where their wait has one cause that CUDA graphs cannot remove: ZeRO-3's per-module hooks
(:mod:`.zero3`), setup for new input shapes (:mod:`.shapesetup`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from profkit.analyzers.parts import HOST_SIDE, part_label
from profkit.analyzers.result import Finding


def host_findings(findings: list[Finding], ranks: Iterable[int]) -> dict[int, list[Finding]]:
    """Per rank of ``ranks`` that has any: its host-side findings, in order."""
    ranks = set(ranks)
    out: dict[int, list[Finding]] = {}
    for f in findings:
        if f.rank in ranks and f.category in HOST_SIDE:
            out.setdefault(f.rank, []).append(f)
    return out


def fold_host(findings: list[Finding], host: dict[int, list[Finding]],
              one: Callable[[Finding, list[Finding]], Finding]) -> list[Finding]:
    """``findings`` with each rank's host findings (``host``) as one: ``one(kept, theirs)``
    where the one with the larger saving was (:func:`kept`), the others dropped."""
    keep = kept(host)
    out = []
    for f in findings:
        if f.rank not in keep or f.category not in HOST_SIDE:
            out.append(f)
        elif f is keep[f.rank]:
            out.append(one(f, host[f.rank]))
    return out


def kept(host: dict[int, list[Finding]]) -> dict[int, Finding]:
    """Per rank: its host finding with the larger saving (the first of equal ones)."""
    return {r: max(fs, key=saving_ms) for r, fs in host.items()}


def waits_words(host: list[Finding]) -> str:
    """``launch overhead 83%, host work 10%``: each host finding's share of the step."""
    return ", ".join(f"{part_label(f.category)} {f.evidence.get('fraction', 0):.0%}"
                     for f in host)


def saving_ms(f: Finding) -> float:
    """The finding's estimated saving in ms per step (0 without one)."""
    return float((f.estimated_saving or {}).get("ms_per_step", 0.0))
