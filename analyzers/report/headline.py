"""The first lines every view of an analysis opens with (text, Markdown, HTML, the notebook,
the dashboard's Overview): the biggest win beside the verdict, and one combined estimate
where savings share time (:mod:`profkit.analyzers.findings.combined`).

- :func:`win_text`: ``rank 1 straggler, with its launch overhead and host work (they share
  time): ~14.79 ms/step, 33% of the step``.
- :func:`verdict_text`: the verdict's summary; where compute bounds the run and memory-bound
  kernels hold a share of it, that share reads as part of the compute (``compute bound: 92%
  of step time (of it, memory-bound kernels: 41% of the step)``), not as a second cause.
- :func:`combined_text`: ``acting on all 3 (...) saves ~14.79 ms/step (33% of the 44.22 ms
  step), not the 38.69 ms their savings add up to: ...`` when the members share time or
  the job's slowest rank caps their sum.
"""

from __future__ import annotations

import math
from typing import Any

from profkit.analyzers.findings.combined import biggest_win, combined_saving
from profkit.analyzers.measure.tables import rank_ranges
from profkit.analyzers.parts import part_label
from profkit.analyzers.units import pct

BOUND_SHARE = "of step time"  # the verdict summary's words after the primary share
NAMES = {"memory_bound": "memory-bound kernels", "runtime_calls": "slow runtime calls",
         "mfu": "low MFU", "fp8": "fp8", "recompute": "activation recompute"}


def _name(category: str) -> str:
    return NAMES.get(category, part_label(category))


def _who(member: dict[str, Any]) -> str:
    where = f"rank {member['rank']} " if member.get("rank") is not None else ""
    return f"{where}{_name(member['category'])}"


def _list(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def _members_text(members: list[dict[str, Any]]) -> str:
    """``rank 1's straggler, launch overhead and host work``; over several ranks, each kind
    with its ranks: ``data loading (ranks 0-1)``."""
    ranks = {m.get("rank") for m in members}
    if len(ranks) == 1 and None not in ranks:
        return f"rank {ranks.pop()}'s " + _list([_name(m["category"]) for m in members])
    return _list(_kinds(members))


def _kinds(members: list[dict[str, Any]]) -> list[str]:
    by_kind: dict[str, list] = {}
    for m in members:
        by_kind.setdefault(m["category"], []).append(m.get("rank"))
    out = []
    for kind, ranks in by_kind.items():
        known = [r for r in ranks if r is not None]
        if not known:
            out.append(_name(kind))
        elif kind == "straggler":
            out += [f"rank {r} straggler" for r in known]
        else:
            out.append(f"{_name(kind)} (rank{'s' if len(known) > 1 else ''} "
                       f"{rank_ranges(known)})")
    return out


def win(a) -> dict | None:
    return biggest_win(a.findings, a.table("rank_breakdown"))


def combined(a) -> dict | None:
    return combined_saving(a.findings, a.table("rank_breakdown"))


def win_text(a) -> str | None:
    """The group of findings that would save the most, alone, as one phrase; None when no
    finding estimates a saving."""
    w = win(a)
    if w is None or not math.isfinite(w["fraction"]):
        return None
    members = w["members"]
    ranks = {m.get("rank") for m in members}
    if len(ranks) == 1 and None not in ranks:
        names = [_name(m["category"]) for m in members]
        text = f"rank {members[0]['rank']} {names[0]}"
        if len(names) > 1:
            text += f", with its {_list(names[1:])} (they share time)"
    else:
        kinds = _kinds(members)
        text = kinds[0] + (f", with {_list(kinds[1:])} (they share time)" if len(kinds) > 1
                           else "")
    return f"{text}: ~{w['ms_per_step']:.2f} ms/step, {pct(w['fraction'])} of the step"


def verdict_text(a) -> str:
    """The verdict's summary, with the memory-bound share inside the compute share."""
    summary = str(a.verdict.get("summary", ""))
    found = [f for f in a.findings
             if f.category == "memory_bound" and isinstance(f.evidence.get("fraction"), float)]
    if a.verdict.get("primary") != "compute" or not found or BOUND_SHARE not in summary:
        return summary
    memory = [f.evidence["fraction"] for f in found]
    low, high = pct(min(memory)), pct(max(memory))
    share = low if low == high else f"{low}-{high}"
    ranks = sorted({f.rank for f in found if f.rank is not None})
    analysed = a.run.get("ranks_analyzed") or []
    where = "" if len(ranks) >= len(analysed) else \
        f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    return summary.replace(BOUND_SHARE, f"{BOUND_SHARE} (of it, memory-bound kernels: {share} "
                           f"of the step{where})", 1)


def combined_text(a) -> str | None:
    """One estimate for acting on every finding with a saving, when adding them would
    mislead (they share time, or the slowest rank caps them); None otherwise."""
    c = combined(a)
    if c is None or c["sum_ms"] <= c["ms_per_step"] + 0.005:
        return None
    members = c["members"]
    count = "both findings" if len(members) == 2 else f"all {len(members)} findings"
    text = (f"acting on {count} with a saving "
            f"({_members_text(members)}) saves ~{c['ms_per_step']:.2f} ms/step "
            f"({pct(c['fraction'])} of the {c['step_ms']:.2f} ms step), not the "
            f"{c['sum_ms']:.2f} ms their savings add up to")
    why = [_shared_why([members[i] for i in group]) for group in c["shared"]]
    if why:
        text += ": " + "; ".join(why)
    else:
        text += (": each saves its own rank's step, and the ranks wait for each other, so "
                 "the job's step is the slowest rank's")
    return text


def _shared_why(group: list[dict[str, Any]]) -> str:
    """Why the members of ``group`` share time, in a clause."""
    late = [m["rank"] for m in group if m["category"] == "straggler"]
    rest = [m for m in group if m["category"] != "straggler"]
    ranks = {m.get("rank") for m in rest}
    one_rank = len(ranks) == 1 and None not in ranks
    names = list(dict.fromkeys(_name(m["category"]) for m in rest)) if one_rank \
        else _kinds(rest)
    verb = "are" if len(names) > 1 else "is"
    if late and rest:
        whose = f"rank {rest[0]['rank']}'s " if one_rank else ""
        them = "it (the straggler)" if len(late) == 1 else \
            f"ranks {rank_ranges(late)} (the stragglers)"
        return f"{whose}{_list(names)} {verb} the time the others wait for {them}"
    if len(set(m["category"] for m in group)) == 1:
        return (f"{names[0].split(' (')[0]} is one fix on several ranks: each saves its own "
                "rank's step, and the ranks wait for each other")
    whose = f"rank {rest[0]['rank']}'s " if one_rank else ""
    return f"{whose}{_list(names)} act on the same time"


def json_block(a) -> dict[str, Any]:
    """``headline`` of the JSON report: the biggest win and the combined saving (or null)."""
    return {"biggest_win": win(a), "combined_saving": combined(a)}
