"""profkit diff's memory line on the H200 memory cases captured this session, against the
labels the workload printed per step (torch.cuda.max_memory_allocated() and
memory_reserved(), SUMMARY.txt; label i is ProfilerStep#i):

- activation checkpointing on -> off: allocated 3,043,457,024 -> 5,296,850,944 B (+74.0%);
- variable sequence lengths, default allocator -> expandable_segments:True: the reserved
  peak 24,515,706,880 -> 17,559,453,696 B (-28.4%), the allocated peak unchanged;
- empty_cache() every step (and without): the same allocated peak.

Read from samples/runs/memory/<case>."""

from __future__ import annotations

from pathlib import Path

import pytest
from profkit.analyzers.compare.diff import diff_analyses

from tests.analysed import analysed
from tests.memory_samples import MEMORY
from tests.realruns import sample_labels


def case(name: str) -> Path:
    path = MEMORY / name
    assert (path / "traces").is_dir(), f"the memory case {name} is missing from {MEMORY}"
    return path


def label(path: Path) -> dict:
    for name, doc in sample_labels(path.parent / "SUMMARY.txt").items():
        if name.removeprefix("memory_") == path.name:
            return doc
    raise AssertionError(f"no label for {path.name}")


def labelled_peak(path: Path, analysis, key: str) -> int:
    """The label's peak over the steps the verdict uses (label i is ProfilerStep#i)."""
    steps = analysis.table("memory")
    used = steps.loc[steps["used"].astype(bool), "step"].astype(int).tolist()
    assert used
    return max(label(path)[key][s] for s in used)


@pytest.mark.parametrize("base, new, allocated, reserved", [
    ("ckpt_on", "ckpt_off", 0.740, None),
    ("varlen_default", "varlen_expandable", 0.0, -0.284),
    ("no_empty_cache", "empty_cache", 0.0, None),
])
def test_memory_change_of_the_captured_cases_is_the_labels(base, new, allocated, reserved):
    paths = case(base), case(new)
    sides = [analysed(p) for p in paths]
    mem = diff_analyses(*sides).verdict["memory"]
    for kind in ("allocated", "reserved"):
        want = [labelled_peak(p, a, f"peak_{kind}_bytes") for p, a in zip(paths, sides)]
        assert [mem[f"base_peak_{kind}_bytes"], mem[f"new_peak_{kind}_bytes"]] == want
        assert mem[f"{kind}_change_frac"] == pytest.approx(want[1] / want[0] - 1)
    assert mem["allocated_change_frac"] == pytest.approx(allocated, abs=0.001)
    if reserved is not None:
        assert mem["reserved_change_frac"] == pytest.approx(reserved, abs=0.001)
