import json
import os
import shutil
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.measure.breakdown import PARTS

from profkit import schema as S
from profkit.cli import main as cli_main
from profkit.errors import NoTracesError, RunConflictError, UsageError
from profkit.run import cache
from profkit.run.loader import load_run
from profkit.run.summary import rank_summary
from tests.factories import BASE_NS, trace_doc, write_trace
from tests.realruns import RUNS, copy_run, read_doc, split_cycles, write_doc, write_profkit_cycles


def reasons(run):
    return {p.split("/")[-1]: r for p, r in ((s.path, s.reason) for s in run.skipped)}


@pytest.mark.parametrize("names", [
    ("rank0.json", "rank1.json"),
    ("rank-0.json.gz", "rank-1.json.gz"),
    ("host_123.1700000000000000000.pt.trace.json.gz", "host_456.1700000000000000001.pt.trace.json.gz"),
])
def test_stock_namings_take_rank_from_distributed_info(tmp_path, names):
    # Write rank 1 under the first name, so file order alone would get it wrong.
    write_trace(tmp_path / names[0], trace_doc(rank=1))
    write_trace(tmp_path / names[1], trace_doc(rank=0))
    run = load_run(tmp_path)
    assert run.rank_ids == [0, 1]
    assert run.ranks[1].path.endswith(names[0])
    assert run.world_size == 2
    assert {d.rank_source for d in run.ranks.values()} == {"distributedInfo"}


def test_rank_from_file_name_then_file_order(tmp_path):
    write_trace(tmp_path / "rank3.json", trace_doc(rank=None))
    write_trace(tmp_path / "zzz.json", trace_doc(rank=None))
    run = load_run(tmp_path)
    assert run.ranks[3].rank_source == "file name"
    assert run.ranks[0].rank_source == "file order"
    assert any("file order" in n for n in run.notes)


def test_bad_and_foreign_files_are_skipped_and_others_load(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    bad = write_trace(tmp_path / "rank1.json.gz", trace_doc(rank=1))
    bad.write_bytes(bad.read_bytes()[:100])
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    (tmp_path / "rank2.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    run = load_run(tmp_path)
    assert run.rank_ids == [0]
    why = reasons(run)
    assert "gzip" in why["rank1.json.gz"]
    assert "notes.txt" not in why  # cannot be a trace: not a line about it
    assert "not a trace file" in why["rank2.json.zst"]  # named like one: worth a line
    assert "no traceEvents" in why["config.json"]


def test_only_bad_files_is_an_error_naming_them(tmp_path):
    (tmp_path / "rank0.json").write_text("{")
    with pytest.raises(NoTracesError, match="rank0.json"):
        load_run(tmp_path)


def test_duplicate_rank_is_reported(tmp_path):
    write_trace(tmp_path / "a.json", trace_doc(rank=0))
    write_trace(tmp_path / "b.json", trace_doc(rank=0))
    run = load_run(tmp_path)
    assert run.rank_ids == [0]
    assert "duplicate rank 0" in reasons(run)["b.json"]
    with pytest.raises(RunConflictError):
        load_run(tmp_path, strict=True, cache=False)


def test_trace_of_another_run_is_reported(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=2))
    write_trace(tmp_path / "rank1.json", trace_doc(rank=1, world_size=2))
    write_trace(tmp_path / "rank5.json", trace_doc(rank=5, world_size=8))
    run = load_run(tmp_path)
    assert run.rank_ids == [0, 1]
    assert "another run" in reasons(run)["rank5.json"]


def test_cache_is_written_reused_and_bypassed(tmp_path):
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    first = load_run(tmp_path)
    folder = tmp_path / ".profkit" / "cache"
    assert cache.load(path) is not None and any(folder.iterdir())
    again = load_run(tmp_path)
    for table in ("events", "collectives", "steps"):
        a, b = getattr(first.ranks[0], table), getattr(again.ranks[0], table)
        assert a.reset_index(drop=True).equals(b.reset_index(drop=True)), table
    # A changed file is re-read, not served stale.
    write_trace(path, trace_doc(rank=0, events=trace_doc()["traceEvents"][:3]))
    assert len(load_run(tmp_path).ranks[0].events) == 3


def test_no_cache_writes_nothing(tmp_path):
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    load_run(tmp_path, cache=False)
    assert not (tmp_path / ".profkit").exists()


def test_profkit_run_directory_applies_clock_offsets(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0))
    write_trace(tmp_path / "traces" / "rank1.pt.trace.json.gz", trace_doc(rank=1))
    (tmp_path / "run.json").write_text(json.dumps({
        "schema": "profkit.run/1", "world_size": 2, "status": "ok",
        "clock_offsets_ns": {"0": 0, "1": 250_000}}))
    run = load_run(tmp_path)
    t0 = run.ranks[0].steps[S.TS_NS].iloc[0]
    t1 = run.ranks[1].steps[S.TS_NS].iloc[0]
    assert t0 == BASE_NS and t1 == BASE_NS - 250_000


def test_nvml_samples_become_counters(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (tmp_path / "nvml").mkdir()
    np.savez(tmp_path / "nvml" / "rank0.0.npz", ts_ns=np.array([BASE_NS, BASE_NS + 10**8]),
             gpu=np.array([0, 0]), sm_clock_mhz=np.array([1980.0, 1755.0]),
             power_w=np.array([300.0, np.nan]))
    counters = load_run(tmp_path).ranks[0].counters
    clocks = counters[counters[S.METRIC] == "sm_clock_mhz"]
    assert list(clocks[S.VALUE]) == [1980.0, 1755.0]
    assert len(counters[counters[S.METRIC] == "power_w"]) == 1  # the NaN reading is dropped


def test_single_file(tmp_path):
    path = write_trace(tmp_path / "whatever.json", trace_doc(rank=4, world_size=8))
    run = load_run(path)
    assert run.rank_ids == [4] and run.world_size == 8


def test_a_failed_rank_marks_the_run_failed(tmp_path):
    for r in (0, 1):
        write_trace(tmp_path / "traces" / f"rank{r}.pt.trace.json.gz", trace_doc(rank=r))
    (tmp_path / "run.json").write_text(json.dumps({"schema": "profkit.run/1", "world_size": 2,
                                                   "status": "ok"}))
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.json").write_text(json.dumps({"rank": 0, "status": "ok"}))
    (tmp_path / "ranks" / "rank1.json").write_text(json.dumps({"rank": 1, "status": "failed"}))
    run = load_run(tmp_path)
    assert run.meta["status"] == "failed" and run.meta["failed_ranks"] == [1]
    assert run.skipped == []  # the status files are not mistaken for traces


def test_on_demand_captures_are_separate_runs(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    capture = tmp_path / "capture-1-20261122T000000"
    write_trace(capture / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (capture / "run.json").write_text("{}")
    run = load_run(tmp_path)
    assert run.ranks[0].path.startswith(str(tmp_path / "traces"))
    assert "on-demand capture" in reasons(run)["capture-1-20261122T000000"]
    assert load_run(capture).rank_ids == [0]


def test_nvml_source_column_is_not_a_metric(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (tmp_path / "nvml").mkdir()
    np.savez(tmp_path / "nvml" / "rank0.0.npz", ts_ns=np.array([BASE_NS]), gpu=np.array([0]),
             source=np.array([0], dtype=np.int8), power_w=np.array([300.0]))
    assert set(load_run(tmp_path).ranks[0].counters[S.METRIC].astype(str)) == {"power_w"}


def test_workers_are_limited_by_free_memory():
    from profkit.run.loader import memory_safe_workers

    gib = 1 << 30
    # 1 GiB traces need ~2.5 GiB each: 10 GiB free (7 usable) holds two at once.
    assert memory_safe_workers([gib, gib, gib, gib], wanted=8, free_bytes=10 * gib) == 2
    assert memory_safe_workers([gib], wanted=8, free_bytes=gib) == 1
    assert memory_safe_workers([1 << 20] * 4, wanted=4, free_bytes=10 * gib) == 4


# --- which files are which rank's: real runs with strangers, cycles, outputs, loops --------
# The base run is zoo/straggler (2 ranks, steps 2-4, rank 1 a straggler: the verdict names
# it); the stranger is zoo/balanced's rank 1 (same world size, no profkit run id, pid 1135,
# recorded 14 s after zoo/straggler ended).

BASE = "zoo/straggler"
STRANGER = RUNS / "zoo" / "balanced" / "traces" / "rank1.pt.trace.json.gz"


@pytest.fixture(scope="module")
def clean():
    return analyze(load_run(RUNS / BASE, cache=False))


def same_verdict(got, clean) -> None:
    """The same verdict and per-rank breakdown as the clean run's analysis."""
    assert got.verdict == clean.verdict
    assert "straggler" in got.verdict["summary"]
    pd.testing.assert_frame_equal(got.table("rank_breakdown"), clean.table("rank_breakdown"))


def test_a_strangers_trace_does_not_replace_a_rank(tmp_path, clean):
    # Copied in under a name that sorts first. run.json says rank 1 was process 1059 on
    # host vm; the stranger's CPU events were recorded by process 1135.
    run = copy_run(BASE, tmp_path / "run")
    shutil.copy(STRANGER, run / "traces" / "rank1.old.pt.trace.json.gz")
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0, 1]
    assert loaded.ranks[1].path == str(run / "traces" / "rank1.pt.trace.json.gz")
    assert reasons(loaded) == {"rank1.old.pt.trace.json.gz": (
        "not this run's rank 1: recorded by process 1135, and run.json has rank 1 as process "
        "1059 on vm")}
    same_verdict(analyze(loaded), clean)
    with pytest.raises(RunConflictError, match=r"rank1\.old\.pt\.trace\.json\.gz: not this run's"):
        load_run(run, strict=True)


def test_in_a_stock_folder_time_tells_the_stranger(tmp_path):
    # No run.json: the real rank 1 overlaps rank 0 in time, the stranger does not.
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 1):
        shutil.copy(RUNS / BASE / "traces" / f"rank{r}.pt.trace.json.gz", run / f"rank{r}.json.gz")
    clean = analyze(load_run(run, cache=False))
    shutil.copy(STRANGER, run / "rank1.000001.json.gz")  # sorts before rank1.json.gz
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0, 1] and loaded.ranks[1].path == str(run / "rank1.json.gz")
    assert reasons(loaded) == {"rank1.000001.json.gz": (
        "duplicate rank 1: its events do not overlap the other ranks' time, unlike those of "
        f"{run / 'rank1.json.gz'}")}
    same_verdict(analyze(loaded), clean)


def test_two_traces_that_cannot_be_told_apart_stop_the_load(tmp_path):
    # Two single-GPU jobs' traces both named rank 0, no run.json, no other rank to compare.
    shutil.copy(RUNS / "zoo" / "compute" / "traces" / "rank0.pt.trace.json.gz",
                tmp_path / "rank0.pt.trace.json.gz")
    shutil.copy(RUNS / "zoo" / "data_loading" / "traces" / "rank0.pt.trace.json.gz",
                tmp_path / "rank0.other.pt.trace.json.gz")
    with pytest.raises(RunConflictError) as err:
        load_run(tmp_path, cache=False)
    message = str(err.value)
    assert "rank 0 is claimed by 2 traces that cannot be told apart" in message
    assert str(tmp_path / "rank0.pt.trace.json.gz") + " (process 856, 2026-11-22 00:22:" in message
    assert str(tmp_path / "rank0.other.pt.trace.json.gz") + " (process 915, " in message
    assert "--ranks" in message and "out of the folder" in message


def test_profkits_own_outputs_are_not_ranks(tmp_path, clean):
    run = copy_run(BASE, tmp_path / "run")
    assert cli_main(["merge", str(run), "-o", str(run / "merged.json.gz"), "-q", "--no-cache"]) == 0
    # a file still being written (profkit's temporary naming) holding a stranger's trace
    shutil.copy(STRANGER, run / "traces" / ".tmp-rank1.pt.trace.json.gz.1059.json")
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0, 1]
    assert loaded.ranks[1].path == str(run / "traces" / "rank1.pt.trace.json.gz")
    assert reasons(loaded) == {
        "merged.json.gz": "a merged trace written by profkit merge, not one rank's trace"}
    same_verdict(analyze(loaded), clean)


def test_links_loops_and_fifos_do_not_make_ranks(tmp_path, clean):
    run = copy_run(BASE, tmp_path / "run")
    (run / "traces" / "again").symlink_to("..")
    (run / "traces" / "loop").symlink_to(".")  # traces/loop/rank0.pt.trace.json.gz, ...
    os.mkfifo(run / "traces" / "rank2.pt.trace.json.gz")
    (run / "traces" / "rank3.pt.trace.json.gz").symlink_to(run / "missing.json.gz")
    loaded = load_run(run, cache=False)
    assert loaded.rank_ids == [0, 1]
    why = reasons(loaded)
    assert set(why) == {"again", "loop", "rank2.pt.trace.json.gz", "rank3.pt.trace.json.gz"}
    assert why["loop"] == f"the same folder as {run / 'traces'}, already searched"
    assert "FIFO" in why["rank2.pt.trace.json.gz"] and "broken" in why["rank3.pt.trace.json.gz"]
    same_verdict(analyze(loaded), clean)


def test_every_profiler_cycle_is_read_as_steps_of_its_rank(tmp_path, clean):
    run = copy_run(BASE, tmp_path / "run")
    write_profkit_cycles(run, [2, 3])  # rank{R}.pt.trace.json.gz: step 2; .cycle1: steps 3-4
    loaded = load_run(run, cache=False)
    assert [list(d.steps[S.STEP]) for d in loaded.ranks.values()] == [[2, 3, 4], [2, 3, 4]]
    assert loaded.notes == ["ranks 0-1: 2 profiler cycles read as steps 2-4"]
    assert loaded.meta["rank_files"]["1"] == [str(run / "traces" / "rank1.pt.trace.json.gz"),
                                              str(run / "traces" / "rank1.cycle1.pt.trace.json.gz")]
    assert loaded.skipped == []
    got = analyze(loaded)
    pd.testing.assert_frame_equal(got.table("step_breakdown"), clean.table("step_breakdown"))
    same_verdict(got, clean)


def test_one_cycle_is_read_with_cycle(tmp_path):
    run = copy_run(BASE, tmp_path / "run")
    write_profkit_cycles(run, [2, 3])
    loaded = load_run(run, cache=False, cycle=1)
    assert [list(d.steps[S.STEP]) for d in loaded.ranks.values()] == [[3, 4], [3, 4]]
    assert loaded.notes == ["ranks 0-1: profiler cycle 1 read"]
    with pytest.raises(NoTracesError, match="no rank has profiler cycle 2"):
        load_run(run, cycle=2)


GAP_US = 5_000_000


def write_gapped_cycles(run, restart_steps: bool = False) -> dict:
    """Rank 0 of a copy of the base run as two cycles, the second (steps 3-4) recorded 5 s
    after the first (unprofiled steps between them); with ``restart_steps`` the second
    counts its steps from 2 again (a second profiler session in the process). Rank 1
    removed. Returns the original trace."""
    doc = read_doc(run / "traces" / "rank0.pt.trace.json.gz")
    first, second = split_cycles(doc, [2, 3])
    for e in second["traceEvents"]:
        if e.get("ph") != "M" and "ts" in e:
            e["ts"] += GAP_US
        if restart_steps and str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) - 1}"  # 3, 4 -> 2, 3
    write_doc(run / "traces" / "rank0.pt.trace.json.gz", first)
    write_doc(run / "traces" / "rank0.cycle1.pt.trace.json.gz", second)
    (run / "traces" / "rank1.pt.trace.json.gz").unlink()
    return doc


def test_the_gap_between_cycles_is_not_charged(tmp_path, clean):
    # Step 3, the first of cycle 1, lasts its own span (its CPU range joined with the GPU
    # work it launched), not from the end of step 2 across the gap.
    run = copy_run(BASE, tmp_path / "run")
    doc = write_gapped_cycles(run)
    loaded = load_run(run, cache=False)
    steps = analyze(loaded).table("step_breakdown")
    whole = clean.table("step_breakdown")
    whole = whole[whole["rank"] == 0].reset_index(drop=True)
    assert list(steps[S.STEP]) == [2, 3, 4]
    assert steps.loc[1, "step_ns"] == own_span_ns(doc, 3)
    assert steps.loc[0, "step_ns"] == whole.loc[0, "step_ns"]
    assert steps.loc[2].equals(whole.loc[2])  # step 4 follows step 3 as before
    assert (steps[list(PARTS)].sum(axis=1) == steps["step_ns"]).all()
    assert steps["step_ns"].sum() < GAP_US * 1000 / 10
    assert rank_summary(loaded.ranks[0])["window_ms"] < GAP_US / 1000 / 10  # profkit summary


def own_span_ns(doc: dict, step: int) -> int:
    """Step ``step``'s span from the raw JSON: its CPU ProfilerStep range joined with the GPU
    work launched from inside that range (exact decimal microseconds to ns)."""
    def us(v) -> Decimal:
        return Decimal(repr(v))

    cpu = max((e for e in doc["traceEvents"] if e.get("name") == f"ProfilerStep#{step}"
               and e.get("cat") == "user_annotation"), key=lambda e: e["dur"])
    lo, hi = us(cpu["ts"]), us(cpu["ts"]) + us(cpu["dur"])
    launches = {e["args"]["correlation"] for e in doc["traceEvents"]
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= us(e["ts"]) < hi
                and "correlation" in e.get("args", {})}
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
           and e.get("args", {}).get("correlation") in launches]
    start = min([lo] + [us(e["ts"]) for e in gpu])
    end = max([hi] + [us(e["ts"]) + us(e["dur"]) for e in gpu])
    return int((end - start) * 1000)


def test_cycles_that_restart_step_numbers_are_renumbered(tmp_path):
    counted_on = copy_run(BASE, tmp_path / "on")
    write_gapped_cycles(counted_on)
    restarted = copy_run(BASE, tmp_path / "restarted")
    write_gapped_cycles(restarted, restart_steps=True)
    loaded = load_run(restarted, cache=False)
    assert loaded.notes == ["rank 0: 2 profiler cycles read as steps 2-4 (renumbered: the "
                            "cycles' ProfilerStep numbers repeat)"]
    pd.testing.assert_frame_equal(analyze(loaded).table("step_breakdown"),
                                  analyze(load_run(counted_on)).table("step_breakdown"))


def test_a_folder_of_on_demand_captures_asks_for_one(tmp_path):
    job = tmp_path / "job"
    copy_run("zoo/balanced", job / "capture-0-20261122T000000")
    copy_run(BASE, job / "capture-1-20261122T000500")
    with pytest.raises(UsageError) as err:
        load_run(job, cache=False)
    assert str(err.value) == (
        f"{job} holds only on-demand captures, each a run of its own: capture-0-20261122T000000, "
        f"capture-1-20261122T000500. Read one: profkit analyze {job / 'capture-1-20261122T000500'}, "
        "or pass --cycle K for capture-K-*")
    picked = load_run(job, cache=False, cycle=1)
    assert picked.path == str(job / "capture-1-20261122T000500")
    assert picked.meta["run_id"] == "20261122T002315Z-9e36c4ee4a83"  # zoo/straggler's
    with pytest.raises(UsageError, match="no on-demand capture 7"):
        load_run(job, cycle=7)


def test_cycle_option_on_the_command_line(tmp_path, capsys):
    run = copy_run(BASE, tmp_path / "run")
    write_profkit_cycles(run, [2, 3])
    out = tmp_path / "a.json"
    assert cli_main(["analyze", str(run), "--cycle", "1", "--format", "json", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["run"]["notes"] == ["ranks 0-1: profiler cycle 1 read"]
    assert doc["run"]["rank_files"]["0"] == [str(run / "traces" / "rank0.cycle1.pt.trace.json.gz")]
    assert [r["steps"] for r in doc["ranks"]] == [2, 2]
    assert cli_main(["summary", str(run)]) == 0
    assert "note: ranks 0-1: 2 profiler cycles read as steps 2-4" in capsys.readouterr().out


def test_a_real_capture_with_repeating_cycles_is_read_whole(tmp_path):
    # profile(repeat=0) on this machine's CPU: wait 1, warmup 1, active 1 for 6 steps
    # writes 2 cycles, recording steps 2 and 5.
    torch = pytest.importorskip("torch")
    import profkit

    model = torch.nn.Linear(16, 16)
    with profkit.profile(tmp_path / "run", wait=1, warmup=1, active=1, repeat=0, nvml=False) as p:
        for _ in range(6):
            model(torch.randn(4, 16)).sum().backward()
            p.step()
    run = load_run(tmp_path / "run", cache=False)
    assert list(run.ranks[0].steps[S.STEP]) == [2, 5]
    assert run.notes == ["rank 0: 2 profiler cycles read as steps 2-5"]
    assert [p.split("/")[-1] for p in run.meta["rank_files"]["0"]] == [
        "rank0.pt.trace.json.gz", "rank0.cycle1.pt.trace.json.gz"]
    assert run.skipped == []


def test_a_conflict_on_a_rank_left_out_with_ranks_does_not_stop_the_load(tmp_path):
    # Two processes (pids 100 and 200) both claim rank 1 over the same time as rank 0.
    write_trace(tmp_path / "rank0.json", trace_doc(rank=0))
    write_trace(tmp_path / "rank1.json", trace_doc(rank=1))
    other = trace_doc(rank=1)
    for e in other["traceEvents"]:
        e["pid"] = 200 if e.get("pid") == 100 else e.get("pid")
    write_trace(tmp_path / "rank1.b.json", other)
    with pytest.raises(RunConflictError, match="rank 1 is claimed by 2 traces"):
        load_run(tmp_path)
    assert load_run(tmp_path, ranks=[0]).rank_ids == [0]
