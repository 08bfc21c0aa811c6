"""The timeline's inference phases on small synthetic tables: a step's consecutive forwards
of one phase become one window (in ms after the origin), an engine's alternating phases
keep each change, a gap splits a phase; each window a translucent band over its rank's
lanes, the first rank's only when there would be too many."""

import pandas as pd
from profkit.dashboard.figures import phase_bands as PB
from profkit.dashboard.figures import timeline as FT
from profkit.dashboard.timeline import phases as TP
from profkit.dashboard.timeline.view import TimelineView

ORIGIN = 1_000_000_000  # ns


def forwards(rows) -> pd.DataFrame:
    """rows of (rank, step, phase, start ms, end ms) after ORIGIN."""
    return pd.DataFrame([{"rank": r, "step": s, "forward": i, "phase": p,
                          "window_start_ns": ORIGIN + int(a * 1e6),
                          "window_end_ns": ORIGIN + int(b * 1e6), "tokens": 1.0, "batch": 1.0,
                          "kernels": 3, "source": "test"} for i, (r, s, p, a, b) in enumerate(rows)])


def test_a_steps_decode_forwards_are_one_window_after_its_prefill():
    rows = [(0, 2, "prefill", 0.0, 30.0)] + [(0, 2, "decode", 30.0 + 10 * k, 40.0 + 10 * k)
                                             for k in range(15)]
    got = TP.phase_windows(forwards(rows), ORIGIN)
    assert got[["phase", "start_ms", "end_ms", "forwards"]].values.tolist() == [
        ["prefill", 0.0, 30.0, 1], ["decode", 30.0, 180.0, 15]]


def test_alternating_phases_steps_ranks_and_gaps_keep_their_own_windows():
    rows = [(0, 1, "prefill", 0.0, 5.0), (0, 1, "decode", 5.0, 6.0), (0, 1, "decode", 6.0, 7.0),
            (0, 1, "prefill", 7.0, 9.0), (0, 1, "decode", 9.0, 10.0),
            (0, 1, "decode", 12.0, 13.0),  # 2 ms with no forward: a second band
            (0, 2, "decode", 13.0, 14.0),  # the next step: its own band
            (1, 1, "decode", 0.0, 4.0)]
    got = TP.phase_windows(forwards(rows), ORIGIN)
    assert got[["rank", "step", "phase", "start_ms", "end_ms", "forwards"]].values.tolist() == [
        [0, 1, "prefill", 0.0, 5.0, 1], [0, 1, "decode", 5.0, 7.0, 2],
        [0, 1, "prefill", 7.0, 9.0, 1], [0, 1, "decode", 9.0, 10.0, 1],
        [0, 1, "decode", 12.0, 13.0, 1], [0, 2, "decode", 13.0, 14.0, 1],
        [1, 1, "decode", 0.0, 4.0, 1]]
    inside = TP.phases_in_window(got, [0], 8.0, 12.5)
    assert inside[["phase", "start_ms"]].values.tolist() == [
        ["prefill", 7.0], ["decode", 9.0], ["decode", 12.0]]


def test_a_window_inside_an_earlier_one_joins_it():
    rows = [(0, 3, "decode", 20.0, 30.0), (0, 3, "decode", 21.0, 22.0),
            (0, 3, "decode", 30.0, 31.0), (1, 3, "decode", 0.0, 50.0),
            (1, 4, "decode", 60.0, 61.0)]  # rank 1's long window reaches no other step
    got = TP.phase_windows(forwards(rows), ORIGIN)
    assert got[["rank", "step", "start_ms", "end_ms", "forwards"]].values.tolist() == [
        [0, 3, 20.0, 31.0, 3], [1, 3, 0.0, 50.0, 1], [1, 4, 60.0, 61.0, 1]]


def test_no_forwards_no_windows_and_no_legend():
    assert TP.phase_windows(pd.DataFrame(), ORIGIN).empty
    assert PB.phase_bands(pd.DataFrame(), {0: (-0.5, 1.5)}, 0.0, 1.0, 2) == ([], [])
    assert PB.legend(set()) == {}
    assert list(PB.legend({"decode", "prefill"})) == ["prefill (inference phase)",
                                                      "decode (inference phase)"]


def view(**kw) -> TimelineView:
    base = dict(ranks=[1, 0], lanes=["rank 1 · GPU stream 7", "rank 0 · GPU stream 7"],
                rank_of={"rank 1 · GPU stream 7": 1, "rank 0 · GPU stream 7": 0},
                layer_of={"rank 1 · GPU stream 7": "gpu", "rank 0 · GPU stream 7": "gpu"},
                x0_ms=0.0, x1_ms=100.0, full_ms=(0.0, 100.0), mode="events", compact=False,
                n_events=0)
    return TimelineView(**{**base, **kw})


def test_each_window_is_a_band_over_its_ranks_lanes_above_the_step_band():
    steps = pd.DataFrame([[0, 2, 0.0, 100.0, True, ""]],
                         columns=["rank", "step", "start_ms", "end_ms", "used", "reason"])
    phases = TP.phase_windows(forwards([(0, 2, "prefill", 0.0, 30.0),
                                        (0, 2, "decode", 30.0, 99.0),
                                        (0, 2, "decode", 99.0, 99.5)]), ORIGIN)
    fig = FT.timeline_figure(view(steps=steps, phases=phases))
    names = [s.name for s in fig.layout.shapes]
    assert names == ["step 2 · rank 0", "prefill · step 2 · rank 0",
                     "decode (2 forwards) · step 2 · rank 0"]
    prefill, decode = fig.layout.shapes[1:]
    # rank 0 is the lower lane (y 0): its block is [-0.5, 0.5]
    assert (prefill.x0, prefill.x1, prefill.y0, prefill.y1) == (0.0, 30.0, -0.5, 0.5)
    assert (decode.x0, decode.x1) == (30.0, 99.5)
    assert prefill.fillcolor == PB.PHASE_FILLS["prefill"] != decode.fillcolor
    assert prefill.layer == decode.layer == "below" and prefill.opacity < 0.5
    texts = [a.text for a in fig.layout.annotations]
    assert "prefill" in texts and "decode (2 forwards)" in texts


def test_a_narrow_band_has_no_label_and_too_many_draw_the_first_ranks_over_every_lane():
    rows = [(r, 1, "decode", k * 0.1, k * 0.1 + 0.05) for r in (0, 1)
            for k in range(PB.MAX_PHASE_BANDS)]
    phases = TP.phase_windows(forwards(rows), ORIGIN)
    shapes, labels = PB.phase_bands(phases, {1: (0.5, 1.5), 0: (-0.5, 0.5)}, 0.0, 100.0, 2)
    assert len(shapes) == PB.MAX_PHASE_BANDS and labels == []
    assert {s["name"].split(" · ")[-1] for s in shapes} == {"rank 1"}
    assert {(s["y0"], s["y1"]) for s in shapes} == {(-0.5, 1.5)}
