"""The timeline in headless chromium, read back from the figure the page drew: every rank
that matters on one axis with collectives linked, zoom out re-queried, the analysis' step
windows, idle time coloured by its cause, a finding's link opening its window."""

import re
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from profkit.analyzers.measure.steps import step_windows
from profkit.dashboard.app import default_roots
from profkit.dashboard.colors import PART_COLORS
from profkit.dashboard.server.registry import RunRegistry

from profkit.run.loader import load_run
from tests.dashboard.conftest import STRAGGLER

KEYS = {e.label: e.key for e in RunRegistry([], default_roots()).entries()}
pytestmark = pytest.mark.skipif("zoo/straggler" not in KEYS, reason="the sample runs are absent")
INFO = "document.querySelector('#tl-info').textContent"
# The figure as plotly.js holds it (typed arrays as plain lists).
FIGURE_JS = """() => {
  const g = document.querySelector('#tl-graph .js-plotly-plot');
  const list = v => v == null ? null : Array.from(v, r =>
      (r !== null && typeof r === 'object' && r.length !== undefined) ? Array.from(r) : r);
  return {traces: g._fullData.map(d => ({type: d.type, name: d.name, x: list(d.x), y: list(d.y),
            z: list(d.z), customdata: list(d.customdata), colorscale: d.colorscale || null,
            shape: d.line ? d.line.shape : null, color: d.line ? d.line.color : null,
            mode: d.mode || null})),
          shapes: g.layout.shapes || [], range: g.layout.xaxis.range,
          ticktext: g.layout.yaxis.ticktext, tickvals: g.layout.yaxis.tickvals};
}"""


# dcc.Graph listens for zooms only once Plotly has drawn the plot (its SVG is there before):
# a relayout sent earlier is lost, and the zoom's answer never comes
LISTENING_JS = """() => {
  const g = document.querySelector('#tl-graph .js-plotly-plot');
  return !!(g && g._ev && g._ev.listeners('plotly_relayout').length);
}"""


def open_timeline(page, label: str, query: str = "") -> dict:
    page.goto(f"{page.base}/run/{KEYS[label]}/timeline{query}")
    page.wait_for_selector("#tl-graph .main-svg")
    page.wait_for_function(LISTENING_JS)
    return page.evaluate(FIGURE_JS)


def lane_of(fig: dict) -> dict[float, str]:
    """y position -> the lane's label (tags stripped)."""
    return {v: re.sub("<[^>]+>", "", t) for v, t in zip(fig["tickvals"], fig["ticktext"])}


def polylines(trace: dict) -> list[list[tuple]]:
    """A line trace's runs of points between None gaps."""
    out, cur = [], []
    for x, y in zip(trace["x"], trace["y"]):
        if x is None:
            out, cur = out + [cur] * bool(cur), []
        else:
            cur.append((x, y))
    return out + [cur] * bool(cur)


def test_both_ranks_straggler_first_with_collectives_linked_and_nvml_held(page):
    fig = open_timeline(page, "zoo/straggler")
    info = page.locator("#tl-info").inner_text()
    assert info.startswith("rank 1 (straggler), rank 0:")
    labels = lane_of(fig)
    top = labels[max(labels)]
    assert top.startswith("rank 1 ·")  # the straggler's lanes first
    assert {lab.split(" ·")[0] for lab in labels.values()} == {"rank 0", "rank 1"}
    links = next(t for t in fig["traces"] if t["name"] == "collective arrival")
    lines = polylines(links)
    assert len(lines) >= 2
    for line in lines:  # one point on each rank, at that rank's start of the collective
        assert sorted(labels[y].split(" ·")[0] for _, y in line) == ["rank 0", "rank 1"]
    skews = [max(x for x, _ in line) - min(x for x, _ in line) for line in lines]
    assert max(skews) > 0.5  # ms: rank 1 arrives late at its collectives
    assert f"{len(lines)} matched collectives linked" in info
    # NVML: read every 100 ms, too slow for this 31 ms run: collapsed, the note says so
    counters = [t for t in fig["traces"] if t["type"] == "scatter" and t["name"].startswith("rank")]
    assert counters == []
    note = page.locator("#tl-note").inner_text()
    assert re.match(r"gpu_util_pct samples in this [\d.]+ ms window: rank 1: \d+, rank 0: \d+\. NVML", note)
    assert "NVML counter(s) hidden" in note
    # asked for: samples held until the next one, with markers
    page.get_by_label("all NVML counters").check()
    page.wait_for_function("!document.querySelector('#tl-note').textContent.includes('hidden')")
    fig = page.evaluate(FIGURE_JS)
    counters = [t for t in fig["traces"] if t["type"] == "scatter" and t["name"].startswith("rank")]
    assert counters and all(t["shape"] == "hv" and "markers" in t["mode"] for t in counters)
    # CPU threads on demand, named as the trace names them, nested ranges one row per depth
    page.get_by_label("CPU threads").check()
    page.wait_for_function("document.querySelector('#tl-graph').textContent.includes('depth 1')")
    ticks = page.evaluate(FIGURE_JS)["ticktext"]
    assert any("thread 1099 (pt_autograd_0) · depth 0" in t for t in ticks)
    assert not [t for t in ticks if "CPU -" in t or "PyTorch Profiler" in t]


# The pixel centre of the longest bar of a group, from plotly's own axes.
BAR_CENTRE_JS = """(group) => {
  const g = document.querySelector('#tl-graph .js-plotly-plot');
  const t = g._fullData.find(d => d.type === 'bar' && d.name === group);
  let best = 0;
  t.x.forEach((w, i) => { if (w > t.x[best]) best = i; });
  const xa = g._fullLayout.xaxis, ya = g._fullLayout.yaxis, box = g.getBoundingClientRect();
  return {x: box.left + xa._offset + xa.l2p(t.base[best] + t.x[best] * 0.5),
          y: box.top + ya._offset + ya.l2p(t.y[best]), start: t.base[best], width: t.x[best],
          name: t.hovertext[best]};
}"""


def test_a_bar_hovers_anywhere_and_a_click_shows_the_event(page):
    """The middle of a long bar (an all_reduce of ~3 ms), far from its ends, hovers; a
    click shows the event with its full kernel name beside the figure."""
    open_timeline(page, "zoo/straggler")
    bar = page.evaluate(BAR_CENTRE_JS, "communication")
    assert bar["width"] > 1.0  # ms: the pointer is > 0.5 ms from either end
    page.mouse.move(bar["x"], bar["y"])
    hover = page.locator("#tl-graph .hoverlayer .hovertext")
    hover.wait_for()
    assert bar["name"].split(" (")[0] in hover.text_content()
    assert "Click an event" in page.locator("#tl-event").inner_text()
    page.mouse.click(bar["x"], bar["y"])
    page.wait_for_function("document.querySelector('#tl-event .tl-event-name') !== null")
    panel = page.locator("#tl-event").inner_text()
    assert "ncclDevKernel_AllReduce" in panel  # the full name; the bar has the short one
    assert f"{bar['start']:.3f} ms" in panel and "duration" in panel and "stream" in panel
    box, event = (page.locator(s).bounding_box() for s in ("#tl-graph", "#tl-event"))
    assert event["x"] >= box["x"] + box["width"] - 1  # beside the figure, in view
    assert event["y"] < box["y"] + 400


def test_step_labels_stay_inside_the_plot(page):
    """A window that ends 0.6 ms into the last step: its label is right-aligned at the
    plot's edge, not cut there; every label lies inside the plot."""
    fig = open_timeline(page, "zoo/straggler")
    last = max(s["x0"] for s in fig["shapes"] if s.get("name", "").startswith("step"))
    x0, x1 = 5.0, last + 0.6
    page.evaluate("([a, b]) => Plotly.relayout(document.querySelector('#tl-graph "
                  ".js-plotly-plot'), {'xaxis.range[0]': a, 'xaxis.range[1]': b})", [x0, x1])
    page.wait_for_function(f"{INFO}.includes(' in {x1 - x0:.2f} ms')")
    plot = page.locator("#tl-graph .nsewdrag").first.bounding_box()
    labels = page.locator("#tl-graph .annotation", has_text=re.compile(r"^step \d"))
    texts = labels.all_text_contents()
    assert len(texts) >= 3 and texts.count("step 4") == 2  # on both ranks' lanes
    for i in range(labels.count()):
        box = labels.nth(i).bounding_box()
        assert plot["x"] - 1 <= box["x"] and box["x"] + box["width"] <= plot["x"] + plot["width"] + 1


def zoom_to_one_ms(page) -> str:
    page.evaluate("Plotly.relayout(document.querySelector('#tl-graph .js-plotly-plot'),"
                  " {'xaxis.range[0]': 5, 'xaxis.range[1]': 6})")
    page.wait_for_function(f"{INFO}.includes(' in 1.00 ms')")
    return page.locator("#tl-info").inner_text()


def test_zoom_out_requeries_the_whole_run(page):
    open_timeline(page, "zoo/straggler")
    full = page.locator("#tl-info").inner_text()
    assert zoom_to_one_ms(page) != full
    # "Reset axes" sends xaxis.range (the first figure's): every step of the run again
    page.locator("#tl-graph .modebar-btn[data-title='Reset axes']").click()
    page.wait_for_function(f"{INFO} === {full!r}")
    zoom_to_one_ms(page)
    # a double-click sends xaxis.autorange
    box = page.locator("#tl-graph .nsewdrag").first.bounding_box()
    page.mouse.dblclick(box["x"] + box["width"] * 0.5, box["y"] + 20)
    page.wait_for_function(f"{INFO} === {full!r}")


def test_a_relayout_that_is_no_zoom_does_not_swallow_the_zoom_answer(page):
    open_timeline(page, "zoo/straggler")
    # the NVML rows (yaxis2 on), collapsed in this 31 ms run until asked for
    page.get_by_label("all NVML counters").check()
    page.wait_for_function("!document.querySelector('#tl-note').textContent.includes('hidden')")
    page.wait_for_function(LISTENING_JS)
    # Dash applies only the answer to a callback's latest request: a relayout about another
    # axis sent while the zoom's request is in flight must not reach the server
    page.evaluate("(() => { const g = document.querySelector('#tl-graph .js-plotly-plot');"
                  " Plotly.relayout(g, {'xaxis.range[0]': 5, 'xaxis.range[1]': 6});"
                  " setTimeout(() => Plotly.relayout(g, {'yaxis2.autorange': true}), 30); })()")
    page.wait_for_function(f"{INFO}.includes(' in 1.00 ms')", timeout=20_000)


def test_step_bands_are_the_analysis_disjoint_windows(page):
    fig = open_timeline(page, "zoo/straggler")
    run = load_run(STRAGGLER, cache=False)
    windows = {r: step_windows(d.steps) for r, d in run.ranks.items()}
    origin = min(int(w[0].min()) for w in windows.values())
    bands = [re.match(r"step (\d+) · rank (\d+)", s.get("name", "")) for s in fig["shapes"]]
    drawn = [(int(m[2]), int(m[1]), s["x0"], s["x1"]) for m, s in zip(bands, fig["shapes"]) if m]
    assert drawn
    for rank, (starts, ends, steps) in windows.items():
        mine = sorted(b[1:] for b in drawn if b[0] == rank)
        assert [m[0] for m in mine] == steps.tolist()
        expected = np.stack([(starts - origin) / 1e6, (ends - origin) / 1e6], axis=1)
        assert np.allclose([m[1:] for m in mine], expected, atol=1e-6)
        assert all(a[2] <= b[1] for a, b in zip(mine, mine[1:]))  # disjoint


def test_launch_bound_idle_time_is_coloured_cpu_launch(page):
    fig = open_timeline(page, "zoo/cpu_launch")
    labels = lane_of(fig)
    heat = next(t for t in fig["traces"] if t["type"] == "heatmap")
    # the colour scale gives each group a unit of z: from transparent to the group's colour
    colours = [stop[1] for stop in heat["colorscale"][1::2]]
    row = {labels[y]: i for i, y in enumerate(heat["y"])}
    cause = [z for z in heat["z"][row["rank 0 · GPU idle cause"]] if z is not None]
    gpu_busy = [b for b in heat["customdata"][row["rank 0 · GPU stream 7"]] if b is not None]
    launch = [z for z in cause if colours[int(z)] == PART_COLORS["cpu_launch"]]
    assert len(launch) > 0.8 * len(cause)  # the idle time is launch latency nearly everywhere
    assert np.mean(gpu_busy) < 0.3  # while the GPU lane itself is nearly white


def test_a_finding_opens_the_timeline_at_its_window(page):
    from profkit.analyzers.report.render import sorted_findings
    from profkit.dashboard.timeline import links as TL

    import profkit

    page.goto(f"{page.base}/run/{KEYS['zoo/straggler']}")
    finding = page.locator("#findings .finding").filter(has_text="straggler").first
    finding.locator("a.tl-link").click()
    page.wait_for_url(re.compile(r".*/timeline\?finding=\d+$"))
    page.wait_for_selector("#tl-graph .main-svg")
    index = int(parse_qs(urlparse(page.url).query)["finding"][0])
    run = load_run(STRAGGLER)
    a = profkit.analyze(run)
    found = sorted_findings(a)[index]
    assert found.category == "straggler" and found.rank == 1  # the link names that finding
    ranks, t0, t1 = TL.finding_window(a, found, run)  # checked by hand in test_timeline_links
    fig = page.evaluate(FIGURE_JS)
    assert ranks == [1, 0] and fig["range"] == pytest.approx([t0, t1], abs=1e-3)
    info = page.locator("#tl-info").inner_text()
    assert info.startswith("rank 1 (straggler), rank 0:") and f" in {t1 - t0:.2f} ms" in info
    assert "matched collectives linked" in info
