"""The dashboard's analysis is ``profkit analyze``'s (the map/reduce of
``analyze_run``), and what it shows beside it comes from the analysis and run.json, not
from the events: the same report, byte for byte, as reading the run whole and analysing it
in one process, and the same Runs-table facts as the events give. Real sample runs, plus
copies made to cover what the samples lack (a CPU-only rank, a clock offset, a bad NVML
chunk)."""

import gzip
import json
import shutil
from collections import Counter
from datetime import datetime, timezone

import orjson
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.report.render import to_json
from profkit.dashboard.server import loading, runfacts
from profkit.dashboard.timeline.data import origin_ns

from profkit.run.loader import load_run
from tests.dashboard.conftest import REPO, STRAGGLER, bad_sidecars

RUNS = REPO / "samples" / "runs"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"}


def report(analysis) -> bytes:
    return orjson.dumps(to_json(analysis), option=orjson.OPT_SERIALIZE_NUMPY)


def copy(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".profkit"))
    return dst


def rewrite_traces(folder, change):
    for trace in sorted((folder / "traces").glob("*.json.gz")):
        doc = json.loads(gzip.decompress(trace.read_bytes()))
        change(trace.name, doc)
        trace.write_bytes(gzip.compress(json.dumps(doc).encode()))


def cpu_only(folder):
    """zoo/straggler with rank 1's GPU work removed: a rank without GPU events."""
    def strip(name, doc):
        if name.startswith("rank1"):
            doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in GPU_CATS]
    rewrite_traces(copy(STRAGGLER, folder), strip)
    return folder


def clock_offset(folder):
    """zoo/straggler with run.json saying rank 1's clock is 3 ms ahead of rank 0's."""
    copy(STRAGGLER, folder)
    meta = json.loads((folder / "run.json").read_text())
    meta["clock_offsets_ns"] = {"0": 0, "1": 3_000_000}
    (folder / "run.json").write_text(json.dumps(meta))
    return folder


CASES = {  # what each covers
    "stock_ddp": lambda tmp: RUNS / "stock_ddp",  # no run.json: the date from the steps
    "compute": lambda tmp: RUNS / "zoo" / "compute",  # one rank on a host of two GPUs
    "marker_steps": lambda tmp: RUNS / "diagnosis" / "marker_steps",  # no steps at all
    "cpu_only": lambda tmp: cpu_only(tmp / "cpu_only"),
    "clock_offset": lambda tmp: clock_offset(tmp / "clock_offset"),
    "bad_sidecars": lambda tmp: bad_sidecars(tmp / "bad_sidecars"),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    path = CASES[request.param](tmp_path_factory.mktemp(request.param))
    shown = loading.show(path)
    assert isinstance(shown, loading.Shown), shown
    return path, shown, load_run(path)


def test_the_report_is_the_in_process_analysis_byte_for_byte(case):
    path, shown, run = case
    whole = analyze(run)
    assert report(shown.analysis) == report(whole)
    assert sorted(shown.analysis.tables) == sorted(whole.tables)
    for name, table in whole.tables.items():
        pd.testing.assert_frame_equal(shown.analysis.tables[name].reset_index(drop=True),
                                      table.reset_index(drop=True), obj=name)


def events_facts(run) -> dict:
    """The Runs table's facts as the dashboard read them from the events before: the
    device of each rank's first GPU event, the first step's start."""
    def gpu(data):
        used = data.events.loc[data.events["device"] >= 0, "device"]
        if not len(used):
            return runfacts.NO_GPU
        device = next((d for d in data.meta.get("devices") or []
                       if d.get("id") == int(used.iloc[0])), None)
        return str((device or {}).get("name") or f"GPU {int(used.iloc[0])}")

    names = Counter(gpu(d) for d in run.ranks.values())
    started = run.meta.get("started_ns") or min(
        (int(d.steps["ts_ns"].min()) for d in run.ranks.values() if len(d.steps)), default=None)
    date = datetime.fromtimestamp(started / 1e9, tz=timezone.utc).strftime(
        "%Y-%m-%d %H:%M") if started else "-"
    return {"gpus": ", ".join(f"{n} x {name}" for name, n in names.items()),
            "date": date, "origin_ns": origin_ns(run)}


def test_the_runs_table_facts_are_those_the_events_give(case):
    path, shown, run = case
    assert shown.facts == events_facts(run)


def test_the_cases_cover_what_they_say(case):
    """So that the facts test cannot pass by every case being alike."""
    path, shown, run = case
    facts = shown.facts
    if path.name == "cpu_only":
        assert facts["gpus"] == f"1 x NVIDIA H200, 1 x {runfacts.NO_GPU}"
    elif path.name == "marker_steps":
        assert facts["date"] == "-" and all(not len(d.steps) for d in run.ranks.values())
    elif path.name == "clock_offset":
        assert run.clock_offset_ns(1) == 3_000_000
    elif path.name == "bad_sidecars":  # analyze_run lists them as the loader does
        assert any(s["path"].endswith("rank1.0.npz") for s in shown.analysis.run["skipped_files"])


def test_the_events_are_read_with_the_analysed_ranks_only(tmp_path, monkeypatch):
    """A rank whose summary fails in analyze_run's map is a skipped file there; reading the
    events for the Timeline sets it aside too, with the same reason."""
    from profkit.analyzers import summaries

    real = summaries.summarize_rank

    def failing_on_rank_1(data, *args, **kwargs):
        if data.rank == 1:
            raise OverflowError("rank 1 is broken")
        return real(data, *args, **kwargs)

    monkeypatch.setattr(summaries, "summarize_rank", failing_on_rank_1)
    run = copy(STRAGGLER, tmp_path / "run")
    shown = loading.show(run)  # two small files: the map runs in this process
    assert shown.analysis.run["ranks_analyzed"] == [0]
    events = loading.reload(run, shown)
    assert events.rank_ids == [0]
    (skipped,) = [s for s in events.skipped if s.path.endswith("rank1.pt.trace.json.gz")]
    assert "OverflowError: rank 1 is broken" in skipped.reason
