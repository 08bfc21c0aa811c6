"""Where the timeline opens and what it joins: default ranks, URL queries, the window of a
finding, and matched collectives linked across ranks. Hand-made analysis tables over the
hand-built two-rank trace of test_timeline_data (every time chosen by hand), and the real
zoo/straggler run checked against its own per-rank collective records."""

from types import SimpleNamespace

import pandas as pd
import pytest
from profkit.analyzers.analyze import Analysis
from profkit.analyzers.result import Finding
from profkit.dashboard.timeline import links as TL

from tests.dashboard import timeline_hand
from tests.dashboard.conftest import STRAGGLER

MS = 1_000_000
BASE = 1_700_000_000_000_000_000  # tests.factories.BASE_NS: the hand run's origin


@pytest.fixture(scope="module")
def hand_run(tmp_path_factory):
    return timeline_hand.hand_run(tmp_path_factory.mktemp("hand"))


def analysis(stragglers=(), **tables) -> Analysis:
    return Analysis(run={}, verdict={}, tables={k: pd.DataFrame(v) for k, v in tables.items()},
                    stragglers=[{"rank": r} for r in stragglers])


def finding(category="cpu_launch", rank=0, step=None) -> Finding:
    return Finding(category=category, severity="warning", message="m", recommendation="r",
                   rank=rank, step=step)


STEPS = {"rank": [0, 0, 1, 1], "step": [2, 3, 2, 3], "used": [True, True, True, False],
         "cpu_launch": [100, 900, 50, 5000], "host_sync": [0, 0, 70, 0]}
# rank 1 arrives last at every collective; rank 0 waits 5 ms in step 2, 1 ms in step 3
WAITS = {"key": ["a", "a", "b", "b", "c", "c"], "rank": [0, 1, 0, 1, 0, 1],
         "wait_ns": [2 * MS, 0, 3 * MS, 0, 1 * MS, 0],
         "start_ns": [BASE + 1 * MS, BASE + 3 * MS, BASE + 3_500_000, BASE + 6_500_000,
                      BASE + 5_200_000, BASE + 6_200_000],
         "dur_ns": [2_100_000, 100_000, 3_100_000, 100_000, 1_100_000, 100_000],
         "step": [2, 2, 2, 2, 3, 3]}
COLL = {"key": ["a", "b", "c"], "collective": "all_reduce", "bytes": 2.0**20,
        "start_skew_ns": [2 * MS, 3 * MS, 1 * MS], "last_rank": 1, "on_gpu": True}
RANK_WAITS = {"rank": [0, 1], "wait_ns": [6 * MS, 0]}


def test_default_ranks_the_straggler_first_then_the_peer_waiting_most(hand_run):
    a = analysis(stragglers=[1], rank_waits=RANK_WAITS)
    assert TL.default_ranks(hand_run, a) == [1, 0]
    assert TL.default_ranks(hand_run, analysis()) == [0, 1]
    assert TL.default_ranks(hand_run, analysis(), cap=1) == [0]


def test_default_ranks_up_to_eight_the_straggler_and_its_peer_first():
    """Twelve ranks, rank 9 the straggler and rank 4 waiting for it most: those two, then
    the others in order, eight in all."""
    run = SimpleNamespace(rank_ids=list(range(12)), ranks=dict.fromkeys(range(12)))
    waits = {"rank": list(range(12)), "wait_ns": [MS] * 4 + [9 * MS] + [MS] * 7}
    assert TL.default_ranks(run, analysis(stragglers=[9], rank_waits=waits)) == [
        9, 4, 0, 1, 2, 3, 5, 6]
    assert TL.default_ranks(run, analysis()) == list(range(8))
    assert TL.RANK_CAP == 8


@pytest.mark.parametrize("text, ranks", [
    ("1,0", [1, 0]), ("0-1", [0, 1]), ("1,1,0", [1, 0]), ("0-9", [0, 1]), ("5-3", None),
    ("7", None), ("", None), ("x", None), ("1;0", None), ("-1", None), ("9" * 10, None),
    (["1", "0"], None), (None, None), ("0," * 300 + "1", None),
])
def test_ranks_from_a_url(text, ranks):
    assert TL.parse_ranks(text, [0, 1]) == ranks


@pytest.mark.parametrize("t0, t1, window", [
    ("1.5", "2.5", (1.5, 2.5)), ("2", "1", None), ("nan", "1", None), ("1", "inf", None),
    ("1e300", "1e301", None), (["1", "2"], "3", None), (None, "1", None), ("1", "1", None),
])
def test_window_from_a_url(hand_run, t0, t1, window):
    assert TL.query_view(hand_run, ranks="1", t0=t0, t1=t1) == ([1], window)


def test_timeline_href():
    assert TL.timeline_href("run-1", [1, 0], 3.81605845, 10.8581) == \
        "/run/run-1/timeline?ranks=1,0&t0=3.8161&t1=10.8581"


def test_a_straggler_opens_on_its_collectives_where_the_others_waited_most(hand_run):
    a = analysis(stragglers=[1], collective_waits=WAITS, collectives=COLL, rank_waits=RANK_WAITS)
    ranks, t0, t1 = TL.finding_window(a, finding("straggler", rank=1), hand_run)
    # step 2 (5 ms of waiting): collectives a and b from 1 ms to 6.6 ms, widened by 5%
    assert ranks == [1, 0]
    assert (t0, t1) == pytest.approx((1.0 - 0.28, 6.6 + 0.28))


def test_a_cause_opens_on_the_used_step_with_the_most_of_it(hand_run):
    a = analysis(step_breakdown=STEPS, idle_code={"rank": [1, 1], "part": ["host_sync", "x"],
                                                    "idle_ns": [9, 1]})
    # rank 0: step 3 has more cpu_launch; its window is [5, 7) ms, widened by 5% of 2 ms
    assert TL.finding_window(a, finding("cpu_launch", 0), hand_run) == \
        ([0], pytest.approx(4.9), pytest.approx(7.1))
    # rank 1: step 3 is left out, so step 2 [0, 5) ms
    assert TL.finding_window(a, finding("launch", 1), hand_run) == \
        ([1], pytest.approx(-0.25), pytest.approx(5.25))
    assert TL.finding_window(a, finding("idle_code", 1), hand_run)[1:] == \
        (pytest.approx(-0.25), pytest.approx(5.25))  # its host_sync is all in step 2
    assert TL.finding_window(a, finding("memory", 0, step=3), hand_run)[1:] == \
        (pytest.approx(4.9), pytest.approx(7.1))


@pytest.mark.parametrize("f", [finding("mfu", 0), finding("cpu_launch", None),
                               finding("cpu_launch", 7), finding("cpu_launch", 0, step=99),
                               finding("straggler", 0)])
def test_findings_without_a_place_in_time(hand_run, f):
    a = analysis(step_breakdown=STEPS, collective_waits=WAITS, collectives=COLL)
    assert TL.finding_window(a, f, hand_run) is None


def link_rows(ranks=(0, 1, 2), keys=("a", "b"), skews=(1.0, 3.0)):
    rows = [{"key": k, "rank": r, "start_ms": 10.0 * i + r, "stream": 17,
             "collective": "all_reduce", "bytes": 1.0, "skew_ms": s, "last_rank": 2}
            for i, (k, s) in enumerate(zip(keys, skews)) for r in ranks]
    return pd.DataFrame(rows)


def test_links_join_the_ranks_shown_in_their_order():
    lanes = [f"rank {r} · GPU stream 17" for r in (2, 0)]
    got, n = TL.links_in_window(link_rows(), [2, 0], lanes, False, 0.0, 100.0)
    assert n == 2
    assert got[["key", "rank", "lane"]].values.tolist() == [
        ["a", 2, lanes[0]], ["a", 0, lanes[1]], ["b", 2, lanes[0]], ["b", 0, lanes[1]]]
    compact, _ = TL.links_in_window(link_rows(), [0, 2], ["rank 0 · GPU", "rank 2 · GPU"], True,
                                    0.0, 100.0)
    assert compact["lane"].tolist() == ["rank 0 · GPU", "rank 2 · GPU"] * 2


def test_links_of_the_window_largest_skews_first_and_never_one_rank_alone():
    lanes = [f"rank {r} · GPU stream 17" for r in (0, 1, 2)]
    got, n = TL.links_in_window(link_rows(), [0, 1, 2], lanes, False, 11.5, 30.0)
    assert n == 1 and set(got["key"]) == {"b"}  # a starts at 0-2 ms, b at 10-12 ms
    got, n = TL.links_in_window(link_rows(), [0, 1, 2], lanes, False, 0.0, 30.0, max_links=1)
    assert n == 2 and set(got["key"]) == {"b"}  # the larger skew
    alone, n = TL.links_in_window(link_rows(), [1], lanes, False, 0.0, 30.0)
    assert n == 0 and alone.empty


def test_link_table_of_a_real_run_matches_each_ranks_collective_records():
    from profkit.dashboard.server import loading
    from profkit.dashboard.timeline.data import origin_ns

    run, a = loading.load(STRAGGLER)
    table = TL.link_table(a, run, origin_ns(run))
    for rank in (0, 1):
        mine = table[table["rank"] == rank].sort_values("start_ms")
        records = run.ranks[rank].collectives.sort_values("ts_ns")
        assert len(mine) == len(records) == 18
        expected = (records["ts_ns"] - origin_ns(run)) / 1e6
        assert mine["start_ms"].to_numpy() == pytest.approx(expected.to_numpy())
        assert (mine["stream"] == records["stream"].to_numpy()).all()
    assert (table["last_rank"] == 1).all()


@pytest.mark.parametrize("f", [finding("straggler", rank=1), finding("cpu_launch", 0),
                               finding("launch", 1), finding("idle_code", 1),
                               finding("memory", 0, step=3), finding("mfu", 0),
                               finding("cpu_launch", None), finding("cpu_launch", 7),
                               finding("cpu_launch", 0, step=99), finding("straggler", 0)])
def test_the_overview_links_exactly_the_findings_the_timeline_can_place(hand_run, f):
    """The Overview decides from the analysis alone (it does not load the run) which
    findings get a timeline link; the timeline places them with the run."""
    a = analysis(stragglers=[1], step_breakdown=STEPS, collective_waits=WAITS, collectives=COLL,
                 rank_waits=RANK_WAITS, idle_code={"rank": [1], "part": ["host_sync"],
                                                   "idle_ns": [9]})
    a.run["ranks_analyzed"] = [0, 1]
    assert TL.finding_has_place(a, f) == (TL.finding_window(a, f, hand_run) is not None)


def test_a_finding_link_opens_that_findings_window(hand_run):
    a = analysis(stragglers=[1], step_breakdown=STEPS, collective_waits=WAITS, collectives=COLL,
                 rank_waits=RANK_WAITS)
    a.findings[:] = [finding("mfu", 0), finding("straggler", rank=1)]
    order = [f.category for f in TL.sorted_findings(a)]
    index = order.index("straggler")
    assert TL.finding_link("k", index) == f"/run/k/timeline?finding={index}"
    ranks, window = TL.query_view(hand_run, a, finding=str(index))
    assert ranks == [1, 0] and window == pytest.approx((1.0 - 0.28, 6.6 + 0.28))
    # an explicit window wins; a bad index or text is no window
    assert TL.query_view(hand_run, a, t0="1", t1="2", finding=str(index))[1] == (1.0, 2.0)
    for bad in ("99", "-1", "x", ["1"], "1" * 20):
        assert TL.query_view(hand_run, a, finding=bad) == (None, None)
