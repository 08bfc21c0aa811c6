"""Every saving is a share its finding names (issue 40, item 6).

"A saving of 97.7% hangs on a 64% cause"; "16% of step time is host work" carried a round
trip's 83%. A reader sees the message and the saving side by side: the saving must not pass
the largest share of the step the message states by more than a rounding point, and a
message that states no share must state at least the time per step the saving takes. The
check reads only the JSON document a user gets (``profkit analyze --format json``): the
numbers written in each message, never the evidence or the saving rules behind them.
"""

from __future__ import annotations

import re

import pytest
from profkit.analyzers.report.render import to_json

from tests.analysed import analysed
from tests.conftest import REPO

ROUNDING = 0.011  # a message's shares are rounded to whole per cent (or 2 significant digits)
PCT = re.compile(r"(\d+(?:\.\d+)?)%")
MS = re.compile(r"(\d+(?:\.\d+)?) ms(?! step)")  # a time, not the step's own length
SAMPLES = sorted({p.parent for p in (REPO / "samples" / "runs").rglob("run.json")}
                 | {REPO / "samples" / "runs" / "stock_ddp",
                    REPO / "samples" / "runs" / "stock_ddp_stack"}
                 | {p for p in (REPO / "tests" / "data" / "public").iterdir() if p.is_dir()})


def unnamed_savings(doc: dict) -> list[str]:
    """The findings of a JSON document whose saving passes what their message names."""
    bad = []
    for f in doc["findings"]:
        saving = f.get("estimated_saving") or {}
        frac, ms = saving.get("fraction"), saving.get("ms_per_step")
        if frac is None or saving.get("per"):
            continue
        shares = [float(x) / 100 for x in PCT.findall(f["message"])]
        times = [float(x) for x in MS.findall(f["message"])]
        if shares:
            if frac > max(shares) + ROUNDING:
                bad.append(f"{f['category']} rank {f['rank']}: saves {frac:.1%}, names "
                           f"{max(shares):.1%}: {f['message']}")
        elif times:
            if ms > max(times) * 1.01 + 0.01:
                bad.append(f"{f['category']} rank {f['rank']}: saves {ms} ms/step, names "
                           f"{max(times)}: {f['message']}")
        else:
            bad.append(f"{f['category']} rank {f['rank']}: names no share: {f['message']}")
    return bad


def test_the_check_catches_a_saving_beyond_its_named_share():
    doc = {"findings": [
        {"category": "host_work", "rank": 0, "message": "rank 0: 16% of step time is host work",
         "estimated_saving": {"ms_per_step": 50.0, "fraction": 0.83}},
        {"category": "host_work", "rank": 1, "message": "rank 1: 16% of step time is host "
         "work; with the blocking syncs before it, one round trip of 83% of the step",
         "estimated_saving": {"ms_per_step": 50.0, "fraction": 0.83}},
        {"category": "fsdp_wrapping", "rank": 0, "message": "its GPU waits 20.5 ms per step",
         "estimated_saving": {"ms_per_step": 30.0, "fraction": 0.5}}]}
    bad = unnamed_savings(doc)
    assert len(bad) == 2 and "rank 0" in bad[0] and "fsdp_wrapping" in bad[1]


@pytest.mark.parametrize("run_dir", SAMPLES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_saving_is_a_share_its_message_names(run_dir):
    doc = to_json(analysed(run_dir))
    assert unnamed_savings(doc) == []
