"""The timeline page's texts from hand-made views: what the info line says about the window,
what the NVML note says about the samples in it, and what a click on an event shows."""

import pandas as pd
from profkit.dashboard.pages import timeline as PT
from profkit.dashboard.timeline import event as TE
from profkit.dashboard.timeline.view import TimelineView

import profkit
from tests.dashboard import timeline_hand
from tests.dashboard.test_loading import text_of


def view(**kw) -> TimelineView:
    base = dict(ranks=[1, 0], lanes=[], rank_of={}, layer_of={}, x0_ms=100.0, x1_ms=131.0,
                full_ms=(0.0, 300.0), mode="events", compact=False, n_events=1234)
    base.update(kw)
    return TimelineView(**base)


def util(rows) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["rank", "metric", "t_ms", "value", "inside"])


SAMPLES = util([(0, "gpu_util_pct", 95.0, 10.0, False), (0, "gpu_util_pct", 105.0, 90.0, True),
                (0, "gpu_util_pct", 125.0, 80.0, True), (0, "gpu_util_pct", 200.0, 5.0, False),
                (1, "gpu_util_pct", 50.0, 0.0, False), (1, "gpu_util_pct", 150.0, 0.0, False),
                (1, "power_w", 110.0, 300.0, True)])


def test_the_note_counts_utilisation_samples_inside_the_window_per_rank():
    note = PT.counters_note(view(counters=SAMPLES, ranks=[0, 1]), all_counters=True)
    assert note.startswith("gpu_util_pct samples in this 31.0 ms window: rank 0: 2, rank 1: 0. ")
    assert note.endswith(PT.UTIL_NOTE) and "cannot resolve steps shorter" in note
    one = PT.counters_note(view(counters=SAMPLES[SAMPLES["rank"] == 1], ranks=[1]))
    assert one.startswith("gpu_util_pct samples in this 31.0 ms window: 0. NVML")
    # drawn only when asked: 2 and 0 samples cannot resolve the window
    assert one.endswith("2 NVML counter(s) hidden (gpu_util_pct, power_w): fewer than 3 samples in "
                        "this window, too few to tell anything about it; zoom out, or tick "
                        "'all NVML counters' to see them.")


def test_the_note_without_utilisation_or_counters():
    power = view(counters=SAMPLES[SAMPLES["metric"] == "power_w"])
    assert PT.counters_note(power, all_counters=True) == PT.UTIL_NOTE
    assert PT.counters_note(view()) is None


def test_info_names_the_ranks_the_window_and_what_is_drawn():
    assert PT.info_text(view(x0_ms=0.0, x1_ms=31.55), {1}) == \
        "rank 1 (straggler), rank 0: 1,234 events in 31.55 ms shown as every event"
    links = pd.DataFrame({"key": ["a", "a", "b", "b", "c", "c"]})
    binned = view(mode="bins", bin_ms=0.5, links=links, n_links=5)
    assert PT.info_text(binned, set()) == (
        "rank 1, rank 0: 1,234 events in 31.00 ms shown as busy fraction per bin (500 us bins);"
        " zoom in for events; 3 of 5 matched collectives linked (largest skews)")
    assert PT.info_text(view(ranks=list(range(9))), set()).startswith("9 ranks: ")


def test_a_click_shows_the_event_it_names_and_nothing_it_does_not(tmp_path):
    """The hand-built run: the bar of rank 0's first kernel names (0, "gpu", 0); a click
    shows its full name and times. Rows, ranks and layers the run lacks show the hint."""
    run = timeline_hand.hand_run(tmp_path)
    cache = PT.LaneCache(run, profkit.analyze(run))
    click = {"points": [{"customdata": [0, "gpu", 0], "x": 1.2}]}
    text = text_of(TE.details(cache, click))
    assert text.startswith("gemm rank 0 lane rank 0 · GPU stream 7 start 1.000 ms end 2.000 ms")
    assert "duration 1.000 ms" in text and "stream 7" in text and "step 2" in text
    idle = text_of(TE.details(cache, {"points": [{"customdata": [0, "cause", 0]}]}))
    assert idle.startswith("GPU idle: host work")  # the host before the first launch call
    for bad in ([0, "gpu", 99], [5, "gpu", 0], [0, "disk", 0], [0, "gpu", True], "x", None):
        assert text_of(TE.details(cache, {"points": [{"customdata": bad}]})) == TE.HINT
    assert "zoom in" in text_of(TE.details(cache, {"points": [{"customdata": 0.5, "x": 3.0}]}))


def test_the_legend_names_the_idle_causes_as_the_reports_do():
    """'idle: launch overhead', as the Overview and the text report name the part, not the
    column key 'idle: cpu_launch' (issue 42: one vocabulary)."""
    idle = [name for name in PT.LEGEND if name.startswith("idle: ")]
    assert idle == ["idle: launch overhead", "idle: host work", "idle: data loading",
                    "idle: host sync", "idle: held work"]
