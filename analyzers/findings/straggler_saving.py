"""What a straggler costs the job: its lateness once its own step is fixed (issue 40, 6d).

The others wait for the straggler (``others_wait_ns_per_step``; the part of it not hidden
under their compute: ``others_exposed_wait_ns_per_step``). That wait is what the straggler
costs only while its own step stays as long as it is. Where its own host is the cause (its
GPU idles on its host ``host_excess_ms_per_step`` longer than the others' do, set by
``consolidate.with_host_lateness``), fixing that host work shortens its step by that excess
and no more: the job then runs at the slower of the others' own step and the straggler's
fixed one, so the saving is the excess, never more than the others wait, hidden under their
compute or not (on a mesh its peers' own host time hides behind that wait, and its excess
over theirs overstates the fix: mesh2x2_hostbound, 92% against 58% measured). The straggler's own
host-side findings carry the same time (``combined.py`` counts the two once); the finding's
message names the excess beside the wait it names, so that its saving is a share it states.
Where its host is not the cause (extra compute), the saving stays the others' exposed wait.

Issue 40: on a 2-rank DDP job whose rank 1 sleeps 40 ms per step, the others' wait promised
75% while removing the sleep saved 52%, and the straggler's own host-work finding said 59%.
samples/runs/pairs/straggler_sleep40 (the same job captured again): 39.28 ms (83%) predicted,
47.49 -> 8.21 ms (83%) measured.
"""

from __future__ import annotations

from dataclasses import replace

from profkit.analyzers.findings.savings import as_fraction
from profkit.analyzers.result import Finding
from profkit.analyzers.units import pct


def straggler_saving(f: Finding) -> Finding:
    """``f`` (a straggler finding, after ``with_host_lateness``) with its estimated saving
    (module doc) and, where its host is the cause, the message naming that lateness."""
    ev = f.evidence
    step = float(ev.get("others_step_ns") or 0.0)
    raw = ev.get("others_wait_ns_per_step")
    wait = float(ev.get("others_exposed_wait_ns_per_step") or 0.0)
    excess_ms = ev.get("host_excess_ms_per_step")
    if excess_ms:
        wait = float(excess_ms) * 1e6
        f = replace(f, message=f.message + (
            f"; its own host keeps its GPU idle {float(excess_ms):.2f} ms per step "
            f"({pct(as_fraction(wait, step))} of their step) longer than theirs, the lateness "
            "that fixing it removes"))
    if raw is not None and raw > 0:  # never more than the others wait for it
        wait = min(wait, float(raw))
    return f.with_saving(wait / 1e6, as_fraction(wait, step))
