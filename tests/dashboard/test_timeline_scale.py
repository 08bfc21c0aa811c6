"""The timeline of many ranks, on synthetic runs built from one real trace
(profkit.trace.synthetic): one row per rank and layer, always binned, each bin's value the rank's
covered time over the bin length, checked against an interval merge written here."""

from pathlib import Path

import numpy as np
import pytest
from profkit.dashboard.figures import timeline as FT
from profkit.dashboard.timeline import data as TD
from profkit.dashboard.timeline import view as TV

from profkit import schema as S
from profkit.run.loader import load_run
from profkit.trace.synthetic import make_run

SOURCE = Path(__file__).resolve().parents[2] / "samples/runs/zoo/balanced/traces/rank0.pt.trace.json.gz"


def synthetic_lanes(folder: Path, n_ranks: int) -> tuple:
    make_run(SOURCE, folder, n_ranks, group_size=4, straggler=n_ranks - 1)
    run = load_run(folder, cache=False)
    origin = TD.origin_ns(run)
    return run, origin, [TD.rank_lanes(run.ranks[r], origin) for r in run.rank_ids]


def merged_busy(starts: list[int], ends: list[int], edges: np.ndarray) -> np.ndarray:
    """Covered time per bin over the bin length, by merging the intervals one by one."""
    merged: list[list[int]] = []
    for s, e in sorted(zip(starts, ends)):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    out = np.zeros(len(edges) - 1)
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        out[i] = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in merged) / (hi - lo)
    return out


def check_compact_view(run, origin: int, lanes: list) -> None:
    n = len(lanes)
    view = TV.timeline_view(lanes, None, n_bins=50)
    assert view.compact and view.mode == "bins"
    assert view.lanes == [f"rank {r} · {layer}" for r in run.rank_ids
                          for layer in ("GPU", "GPU idle cause")]
    assert ((view.bins["busy"] > 0) & (view.bins["busy"] <= 1)).all()
    edges_ns = np.linspace(view.x0_ms, view.x1_ms, 51) * 1e6
    for rank in (0, n - 1):
        ev = run.ranks[rank].events
        gpu = ev[ev[S.KIND].isin(S.GPU_KINDS)]
        starts = (gpu[S.TS_NS] - origin).tolist()
        ends = (gpu[S.TS_NS] + gpu[S.DUR_NS] - origin).tolist()
        expected = merged_busy(starts, ends, edges_ns)
        got = view.bins[view.bins["lane"] == f"rank {rank} · GPU"]
        drawn = np.zeros(50)  # idle bins are left out of the view
        drawn[np.rint((got["bin_ms"] - view.x0_ms) / view.bin_ms).astype(int)] = got["busy"]
        assert drawn == pytest.approx(expected, abs=1e-9)
        assert expected.max() > 0.5  # the ranks' GPUs are busy for most of some bins
    fig = FT.timeline_figure(view)
    assert len(fig.layout.yaxis.tickvals) == 2 * n
    assert [t.type for t in fig.data].count("heatmap") == 1


def test_twelve_ranks_are_compact_rows_binned_by_covered_time(tmp_path):
    check_compact_view(*synthetic_lanes(tmp_path, 12))


@pytest.mark.slow
def test_sixty_four_ranks_are_compact_rows_binned_by_covered_time(tmp_path):
    check_compact_view(*synthetic_lanes(tmp_path, 64))
