"""Pages on real bundled runs (issue 42, items 3 and 8): the Communication page of a
single-GPU run says there is none, the per-rank step breakdown is a table, and on
why/recompile (every profiled step compiles: no verdict) the heatmap marks no step as used
and the MFU reads "-". Expected values are recomputed from other tables of the analysis or
read from the samples' SUMMARY.txt, not from the code under test."""

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.parts import PART_TABLE
from profkit.dashboard.figures import charts as F
from profkit.dashboard.pages import comms, overview
from profkit.dashboard.ui import tables as T

from tests.analysed import analysed
from tests.conftest import REPO
from tests.dashboard.test_loading import text_of

RUNS = REPO / "samples" / "runs"


def test_single_gpu_run_says_it_has_no_communication():
    a = analysed(RUNS / "zoo" / "compute")  # run.json: world_size 1
    text = text_of(comms.body(a, 0))
    assert "single-rank run" in text and "no collectives" in text
    assert "Waits per rank" not in text  # no empty heatmap, skew chart or tables


def test_two_rank_run_keeps_its_communication_panels():
    a = analysed(RUNS / "zoo" / "straggler")
    assert comms.nothing_to_show(a) is None
    assert "Click a cell of the wait heatmap" in text_of(comms.body(a, 0))


def test_rank_breakdown_table_in_the_parts_words():
    a = analysed(RUNS / "zoo" / "straggler")
    spec = T.BY_NAME["rank_breakdown"]
    assert T.TABLES[0] is spec  # first on the Tables page
    table, _ = T.readable(spec, T.source(a, spec))
    shown = [f"{p.label} (%)" for p in PART_TABLE if f"{p.label} (%)" in table]
    assert "compute (%)" in shown and "launch overhead (%)" in shown
    assert "pipeline bubble (%)" not in table  # not a pipeline: no rank has a bubble
    # independently: each part's share from the used steps of step_breakdown
    steps = a.table("step_breakdown")
    steps = steps[steps["used"].astype(bool)]
    per_rank = steps.groupby("rank")[["compute", "host_work", "step_ns"]].sum()
    for row in table.itertuples(index=False):
        got = dict(zip(table.columns, row))
        r = per_rank.loc[got["rank"]]
        assert got["compute (%)"] == pytest.approx(100 * r["compute"] / r["step_ns"], abs=0.01)
        assert got["host work (%)"] == pytest.approx(100 * r["host_work"] / r["step_ns"], abs=0.01)
        assert got["step (ms)"] == pytest.approx(
            steps[steps["rank"] == got["rank"]]["step_ns"].median() / 1e6)
        assert sum(got[c] for c in shown) == pytest.approx(100, abs=0.05)


def summary_line(path, key):
    import json
    for line in path.read_text().splitlines():
        if line.startswith(key + " PROFKIT_SAMPLE "):
            return json.loads(line.split(" ", 2)[2])
    raise AssertionError(key)


def test_recompile_heatmap_marks_no_step_used_and_mfu_is_a_dash():
    label = summary_line(RUNS / "why" / "SUMMARY.txt", "why_recompile")
    assert label["compiles_in_loop"] == label["steps"]  # the workload: every step compiles
    a = analysed(RUNS / "why" / "recompile")
    assert a.verdict["primary"] is None  # "... none shows the steady state: no verdict"
    steps = a.table("step_breakdown")
    fig = F.step_heatmap(steps, overview.verdict_ranks(a))
    hover = np.asarray(fig.data[0].customdata).ravel().tolist()
    assert hover and not any("used for the verdict" == h for h in hover)
    assert all("compiles" in h for h in hover)
    crossed = next(t for t in fig.data if t.name == F.LEFT_OUT)
    assert len(crossed.x) == len(steps)  # every profiled step crossed
    facts = text_of(overview.facts_card(a))
    assert "MFU" in facts and "0%" not in facts


def test_mfu_keeps_its_value_where_there_is_a_verdict():
    a = analysed(RUNS / "zoo" / "compute")
    mfu = a.table("efficiency")["mfu"].mean()
    assert np.isfinite(mfu) and mfu > 0
    assert f"{mfu:.0%}" in text_of(overview.facts_card(a))
    fig = F.step_heatmap(a.table("step_breakdown"), overview.verdict_ranks(a))
    used = a.table("step_breakdown")["used"].astype(bool).sum()
    hover = pd.Series(np.asarray(fig.data[0].customdata).ravel())
    assert (hover == "used for the verdict").sum() == used


def test_step_marker_advice_names_the_command_that_takes_it():
    """diagnosis/marker_steps has no ProfilerStep#, only train_step ranges: the note's
    advice to pass --step-marker is for `profkit analyze`; the dashboard has no option."""
    from profkit.dashboard.ui import banner

    a = analysed(RUNS / "diagnosis" / "marker_steps")
    assert any("--step-marker" in n for n in a.run["notes"])  # the analysis' own words
    text = text_of(banner.run_banner(a.run))
    assert "profkit analyze RUN --step-marker NAME" in text and "train_step x3" in text
    assert "pass --step-marker" not in text and "`" not in text


def test_a_kernel_without_an_occupancy_estimate_shows_none():
    """zoo/straggler's trace gives its nvjet GEMMs 'est. achieved occupancy %': 0 (1 block
    of 12 warps per SM: Kineto made no estimate) and its elementwise kernels 100."""
    import gzip
    import json

    from profkit.dashboard.pages import timeline as PT
    from profkit.dashboard.timeline import event as TE

    from profkit.run.loader import load_run
    run_dir = RUNS / "zoo" / "straggler"
    doc = json.loads(gzip.decompress((run_dir / "traces" / "rank0.pt.trace.json.gz").read_bytes()))
    occupancy = {e["args"]["correlation"]: e["args"].get("est. achieved occupancy %")
                 for e in doc["traceEvents"] if e.get("cat") == "kernel"}
    run = load_run(run_dir)
    cache = PT.LaneCache(run, analysed(run_dir))
    gpu = cache.lanes(0).events["gpu"]
    events = run.ranks[0].events
    seen = set()
    for row, source in enumerate(gpu["source"]):
        if source < 0 or events["kind"].iloc[int(source)] != "kernel":
            continue
        name = int(events["correlation"].iloc[int(source)])
        text = text_of(TE.event_panel(cache, 0, "gpu", row))
        if occupancy[name] == 0:
            assert "occupancy" not in text, name  # before: "occupancy 0%"
        else:
            assert "occupancy" in text and str(occupancy[name]) in text, name
        seen.add(occupancy[name] == 0)
    assert seen == {True, False}  # both kinds checked


def test_launch_arrows_join_each_runtime_call_to_its_gpu_work():
    """zoo/straggler with CPU threads shown: an arrow per cudaLaunchKernel / cudaMemcpyAsync
    -> its kernel or copy; each arrow's queue delay is the raw trace's (the GPU event's ts
    minus the runtime call's ts for the same correlation id, read from the JSON here)."""
    import gzip
    import json

    from profkit.dashboard.figures import timeline as FT
    from profkit.dashboard.pages import timeline as PT
    from profkit.dashboard.timeline import flows as TF
    from profkit.dashboard.timeline import view as TV

    from profkit.run.loader import load_run
    run_dir = RUNS / "zoo" / "straggler"
    doc = json.loads(gzip.decompress((run_dir / "traces" / "rank0.pt.trace.json.gz").read_bytes()))
    launch_us, gpu_us = {}, {}
    for e in doc["traceEvents"]:
        corr = (e.get("args") or {}).get("correlation")
        if corr is None or e.get("ph") != "X":
            continue
        if e.get("cat") == "cuda_runtime":
            launch_us[corr] = e["ts"]
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu_us[corr] = e["ts"]
    run = load_run(run_dir)
    cache = PT.LaneCache(run, analysed(run_dir))
    view = TV.timeline_view([cache.lanes(0)], None, show_cpu=True)
    view.flows = TF.launch_flows(view, {0: (cache.lanes(0), run.ranks[0].events)})
    assert 100 <= len(view.flows) <= TF.MAX_FLOWS
    for f in view.flows.itertuples():
        raw_delay_us = gpu_us[f.correlation] - launch_us[f.correlation]
        assert (f.start_ms - f.launch_ms) * 1e3 == pytest.approx(raw_delay_us, abs=0.01)
        assert "GPU stream" in f.gpu_lane and "thread" in f.cpu_lane
    arrows = next(t for t in FT.timeline_figure(view).data if t.name == FT.FLOW_NAME)
    assert sum(x is not None for x in arrows.x) == 2 * len(view.flows)
    hidden = TV.timeline_view([cache.lanes(0)], None, show_cpu=False)
    assert TF.launch_flows(hidden, {0: (cache.lanes(0), run.ranks[0].events)}).empty


def test_search_by_name_counts_and_times_the_matches():
    """'nccl' on zoo/straggler rank 0: the NCCL kernels of the raw trace (name holds
    'nccl', any case), counted and their durations summed from the JSON here."""
    import gzip
    import json

    from profkit.dashboard.pages import timeline as PT
    from profkit.dashboard.timeline import search as TS

    from profkit.run.loader import load_run
    run_dir = RUNS / "zoo" / "straggler"
    doc = json.loads(gzip.decompress((run_dir / "traces" / "rank0.pt.trace.json.gz").read_bytes()))
    nccl = [e["dur"] for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and "nccl" in e["name"].lower()]
    assert nccl
    run = load_run(run_dir)
    cache = PT.LaneCache(run, analysed(run_dir))
    found = TS.matches([cache.lanes(0)], "NCCL")
    gpu = found[(found["layer"] == "gpu") & (found["scope"] == "run")].iloc[0]
    assert gpu["events"] == len(nccl)
    assert gpu["total_ms"] == pytest.approx(sum(nccl) / 1e3, rel=1e-6)
    text = TS.summary(found, "NCCL", "rank 0")
    assert text.startswith(f'"NCCL" on rank 0: GPU {len(nccl)} event(s), {sum(nccl) / 1e3:.3f} ms')
    assert TS.matches([cache.lanes(0)], "no such kernel name")["events"].sum() == 0
