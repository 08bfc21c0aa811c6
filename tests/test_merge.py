import gzip
import json
from collections import Counter

import numpy as np
import pytest

from profkit.run.loader import load_run
from profkit.timeline.merge import Window, merge_run
from tests.factories import BASE_NS, trace_doc, two_step_events, write_trace

PROCESS_META = {"process_name", "process_labels", "process_sort_index"}


def read(path):
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


@pytest.fixture
def run_dir(tmp_path):
    # Rank 1's trace has a base time 2 s later and its events 2 s earlier: same absolute time.
    write_trace(tmp_path / "run" / "rank0.json", trace_doc(rank=0))
    shifted = two_step_events(1)
    for ev in shifted:
        if "ts" in ev:
            ev["ts"] -= 2_000_000.0
    write_trace(tmp_path / "run" / "rank1.json.gz", trace_doc(rank=1, events=shifted,
                                                              base_ns=BASE_NS + 2_000_000_000))
    return tmp_path / "run"


def non_process_meta(events):
    return [e for e in events if not (e["ph"] == "M" and e["name"] in PROCESS_META)]


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_merge_keeps_every_event_and_separates_ranks(run_dir, tmp_path, suffix):
    out = tmp_path / f"merged{suffix}"
    report = merge_run(load_run(run_dir), out)
    doc = read(out)
    events = doc["traceEvents"]
    source = two_step_events()
    kept = non_process_meta(events)
    # Every non-process-metadata event of both ranks, with its args.
    assert len(kept) == 2 * len(non_process_meta(source))
    assert Counter(e["ph"] for e in kept) == Counter(e["ph"] for e in non_process_meta(source * 2))
    nccl = [e for e in kept if e["name"].startswith("ncclDevKernel")]
    assert all(e["args"]["Collective name"] == "allreduce" for e in nccl)
    assert report.events_written == len(events)
    # pids: no pid shared between ranks; every pid named with its rank.
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    by_rank = {}
    for e in kept:
        rank = int(names[e["pid"]].split(" ")[1].rstrip(" ·"))
        by_rank.setdefault(rank, set()).add(e["pid"])
    assert set(by_rank) == {0, 1} and not (by_rank[0] & by_rank[1])
    assert any("GPU 0" in n for n in names.values())
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e["name"] == "process_sort_index"}
    assert set(sort) == set(names)
    assert max(sort[p] for p in by_rank[0]) < min(sort[p] for p in by_rank[1])


def test_clocks_aligned_and_flows_unique(run_dir, tmp_path):
    out = tmp_path / "m.json"
    merge_run(load_run(run_dir), out)
    doc = read(out)
    base = doc["baseTimeNanoseconds"]
    gemm = [e for e in doc["traceEvents"] if e["name"].startswith("sm90_xmma")]
    absolute = sorted(base + round(e["ts"] * 1000) for e in gemm)
    assert absolute == [BASE_NS + 100_000, BASE_NS + 100_000]  # both ranks at the same instant
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert len({(e["ph"], e["id"]) for e in flows}) == 4


def test_rank_and_window_filters(run_dir, tmp_path):
    run = load_run(run_dir)
    out = tmp_path / "m.json"
    merge_run(run, out, ranks=[1], window=Window(BASE_NS + 1_000_000, BASE_NS + 2_000_000))
    kept = non_process_meta(read(out)["traceEvents"])
    xs = [e for e in kept if e["ph"] == "X"]
    assert {e["name"] for e in xs} == {"ProfilerStep#2", "cudaLaunchKernel",
                                       "void at::native::vectorized_elementwise_kernel<4>"}
    assert read(out)["profkit"]["ranks"] == [1]


def test_failed_merge_leaves_no_output(run_dir, tmp_path):
    run = load_run(run_dir)
    out = tmp_path / "m.json"
    out.write_text("previous")
    run.ranks[0].counters = None  # breaks the writer midway
    with pytest.raises(AttributeError):
        merge_run(run, out)
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def test_file_that_vanished_is_reported_not_fatal(run_dir, tmp_path):
    run = load_run(run_dir)
    (run_dir / "rank1.json.gz").write_bytes(b"garbage")
    report = merge_run(run, tmp_path / "m.json")
    assert report.ranks == [0, 1]
    assert any(s.path.endswith("rank1.json.gz") for s in report.skipped)
    assert read(tmp_path / "m.json")["profkit"]["skipped_files"]


def test_counters_become_tracks_beside_the_gpu(tmp_path):
    write_trace(tmp_path / "traces" / "rank0.pt.trace.json.gz", trace_doc(rank=0, world_size=1))
    (tmp_path / "nvml").mkdir()
    np.savez(tmp_path / "nvml" / "rank0.0.npz", ts_ns=np.array([BASE_NS + 10**5]),
             gpu=np.array([0]), sm_clock_mhz=np.array([1980.0]))
    out = tmp_path / "m.json"
    merge_run(load_run(tmp_path), out)
    events = read(out)["traceEvents"]
    counter = [e for e in events if e["ph"] == "C"]
    assert counter == [{"ph": "C", "name": "sm_clock_mhz", "pid": counter[0]["pid"], "tid": 0,
                        "ts": 100.0, "args": {"sm_clock_mhz": 1980.0}}]
    gpu_pids = {e["pid"] for e in events if e.get("cat") == "kernel"}
    assert counter[0]["pid"] in gpu_pids


def test_merge_writes_every_profiler_cycle_of_a_rank(tmp_path):
    from tests.realruns import RUNS, copy_run, write_profkit_cycles

    run = copy_run("zoo/straggler", tmp_path / "run")
    write_profkit_cycles(run, [2, 3])
    out = tmp_path / "merged.json"
    merge_run(load_run(run), out)
    merged = read(out)
    whole = [read(RUNS / "zoo" / "straggler" / "traces" / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    assert sum(e["ph"] == "X" for e in merged["traceEvents"]) == \
        sum(e.get("ph") == "X" for doc in whole for e in doc["traceEvents"])
    steps = {e["name"] for e in merged["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")}
    assert steps == {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"}
    assert merged["profkit"]["schema"] == "profkit.merged/1"


def test_processes_get_clean_names(tmp_path):
    """Kineto's pid -1 (events of no process) is "CPU", a process with an empty label is the
    rank alone: never "rank 0 · " or "CPU (pid -1)"."""
    from tests.realruns import RUNS

    out = tmp_path / "m.json"
    merge_run(load_run(RUNS / "stock_ddp", cache=False), out)
    names = [e["args"]["name"] for e in read(out)["traceEvents"] if e.get("name") == "process_name"]
    assert not [n for n in names if n.endswith((" · ", "·")) or "pid -1" in n or "  " in n]
    for rank in (0, 1):
        mine = {n for n in names if n.split(" · ")[0] == f"rank {rank}"}
        assert {f"rank {rank}", f"rank {rank} · CPU", f"rank {rank} · GPU {rank}"} <= mine
