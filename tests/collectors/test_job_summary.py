"""profile(summarize=True): the run's analysis written by rank 0 when the capture ends.

The distributed cases run one real 2-process gloo job on CPU under torchrun, which goes
through several captures in turn (the summary uses no collective, so the job's process
group stays usable after each); the single-process cases run here. Jobs where a rank
fails for good are in test_failing_rank.py.
"""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import pytest
import torch
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report.render import to_json
from profkit.collectors import profile
from profkit.collectors.in_job import summarize as job_summary

from profkit.run.discover import find_trace_files
from profkit.run.loader import load_run

RANK0_LATE_S = 3  # rank 0 goes on this long after rank 1 raised ("raise")
RANK1_LATE_S = 4  # rank 1 reaches the end of "late" this long after rank 0
LATE_TIMEOUT_S = 1  # PROFKIT_SUMMARY_TIMEOUT_S of "late"

# One job, four captures in turn: "ok" (DDP training), "raise" (rank 1 raises at step 3
# of steps without collectives; rank 0 goes on for RANK0_LATE_S), "late" (rank 1 reaches
# the end RANK1_LATE_S after rank 0, which waits LATE_TIMEOUT_S) and "destroyed" (the user
# destroys the process group inside the context). Each rank writes its timings.
JOB = textwrap.dedent("""
    import json, os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from profkit.collectors import profile

    out, rank0_late_s, rank1_late_s, late_timeout_s = sys.argv[1], *map(float, sys.argv[2:])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    times = {}

    def capture(name, timeout_s=60):
        os.environ["PROFKIT_SUMMARY_TIMEOUT_S"] = str(timeout_s)
        return profile(f"{out}/{name}", wait=1, warmup=1, active=2, nvml=False,
                       summarize=True)

    def train(p, model, steps):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(steps):
            model(torch.randn(16, 32)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            p.step()

    def ddp():
        return DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, 8)))

    with capture("ok") as p:
        train(p, ddp(), 4)

    err = RuntimeError(f"boom on rank {rank}")
    try:
        with capture("raise") as p:
            train(p, torch.nn.Linear(32, 8), 3)  # no collective in these steps
            if rank == 1:
                times["raised"] = time.monotonic()
                raise err
            train(p, torch.nn.Linear(32, 8), 1)
            time.sleep(rank0_late_s)
    except RuntimeError as e:
        times["caught"], times["same_error"] = time.monotonic(), e is err

    with capture("late", timeout_s=late_timeout_s) as p:
        train(p, torch.nn.Linear(32, 8), 4)
        if rank == 1:
            time.sleep(rank1_late_s)
        times["late_exit"] = time.monotonic()
    times["late_left"] = time.monotonic()

    with capture("destroyed") as p:
        train(p, ddp(), 4)
        dist.destroy_process_group()

    with open(f"{out}/times{rank}.json", "w") as f:
        json.dump(times, f)
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)  # skip teardown (see test_collectors_ddp.py)
""")


@pytest.fixture(scope="module")
def job(tmp_path_factory, torchrun):
    """The four captures' run folders, each rank's timings and the job's output."""
    out = tmp_path_factory.mktemp("job")
    script = out / "job.py"
    script.write_text(JOB)
    r = torchrun(script, out, RANK0_LATE_S, RANK1_LATE_S, LATE_TIMEOUT_S, timeout_s=150)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    times = [json.loads((out / f"times{rank}.json").read_text()) for rank in (0, 1)]
    return SimpleNamespace(out=out, times=times, stderr=r.stderr)


def report(run_dir):
    return json.loads((run_dir / "profkit-report" / "report.json").read_bytes())


def report_text(run_dir):
    return (run_dir / "profkit-report" / "report.txt").read_text()


def test_two_rank_job_writes_the_runs_analysis(job):
    run_dir = job.out / "ok"
    doc = report(run_dir)
    assert doc["schema"] == "profkit.analysis/1"
    assert doc["run"]["world_size"] == 2 and doc["run"]["ranks_analyzed"] == [0, 1]
    assert doc["run"]["status"] == "ok" and doc["run"]["skipped_files"] == []
    assert doc["ranks"] == []  # per-rank step breakdowns need GPU events; this job is CPU
    text = report_text(run_dir)
    assert text.startswith(f"profkit analysis of {run_dir}\n2 of 2 ranks analysed\n"
                           "parallel layout: 2 ranks: dp 2\n\nVERDICT:")  # the job is DDP

    # the same analysis as the library's map-reduce over the trace files, afterwards
    assert doc == json.loads(json.dumps(to_json(analyze_run(run_dir, workers=1, cache=False))))
    # the report is not taken for a trace, nor skipped with a note, when the run is read
    traces, skipped = find_trace_files(run_dir)
    assert [t.name for t in traces] == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    assert skipped == []
    assert load_run(run_dir, cache=False).skipped == []


def test_a_rank_that_raises_leaves_at_once_and_is_reported_failed(job):
    rank0, rank1 = job.times
    # the user's exception reached the user's code, the same object, on rank 1 only, and
    # without waiting for rank 0 (which went on RANK0_LATE_S longer)
    assert rank1["same_error"] is True and "caught" not in rank0
    assert rank1["caught"] - rank1["raised"] < RANK0_LATE_S / 2

    run_dir = job.out / "raise"
    statuses = [json.loads((run_dir / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["status"] for s in statuses] == ["ok", "failed"]
    assert statuses[1]["error"]["type"] == "RuntimeError"
    # rank 0 wrote the report: rank 1's trace skipped with its failure, the run failed
    doc = report(run_dir)
    assert doc["run"]["status"] == "failed" and doc["run"]["world_size"] == 2
    assert doc["run"]["ranks_analyzed"] == [0]
    assert doc["run"]["rank_errors"] == {"1": "RuntimeError: boom on rank 1"}
    ((skip),) = doc["run"]["skipped_files"]
    assert skip["path"].endswith("traces/rank1.pt.trace.json.gz")
    assert skip["reason"] == "rank 1 failed: RuntimeError: boom on rank 1"
    lines = report_text(run_dir).splitlines()
    assert lines[1] == "RUN STATUS: failed (rank 1: RuntimeError: boom on rank 1)"
    # the line wraps at the report's width (100 columns), the path kept whole
    assert f"skipped: {skip['path']}: {skip['reason']}" in " ".join(" ".join(lines).split())


def test_a_rank_that_never_answers_costs_only_its_part_of_the_report(job):
    rank0, rank1 = job.times
    # rank 0 gave up after about the timeout instead of waiting for rank 1's 4 s
    assert rank0["late_left"] - rank0["late_exit"] < RANK1_LATE_S - 1
    assert rank0["late_left"] - rank0["late_exit"] >= LATE_TIMEOUT_S
    assert rank1["late_left"] - rank1["late_exit"] < RANK1_LATE_S - 1  # nobody waits for 0

    run_dir = job.out / "late"
    doc = report(run_dir)
    assert doc["run"]["status"] == "incomplete" and doc["run"]["ranks_analyzed"] == [0]
    why = f"sent no summary within {LATE_TIMEOUT_S:g} s (still running, hung or killed)"
    assert doc["run"]["rank_errors"] == {"1": why}
    assert [s["reason"] for s in doc["run"]["skipped_files"]] == [f"rank 1 {why}"]
    assert report_text(run_dir).splitlines()[1] == f"RUN STATUS: incomplete (rank 1: {why})"
    # both ranks ended well: their own statuses say so
    assert json.loads((run_dir / "run.json").read_text())["status"] == "ok"
    assert json.loads((run_dir / "ranks" / "rank1.json").read_text())["status"] == "ok"


def test_the_summary_works_after_the_process_group_was_destroyed(job):
    doc = report(job.out / "destroyed")
    assert doc["run"]["status"] == "ok" and doc["run"]["ranks_analyzed"] == [0, 1]
    assert doc["run"]["skipped_files"] == []
    assert "no in-job summary" not in job.stderr


def train(p, steps):
    model = torch.nn.Linear(16, 16)
    for _ in range(steps):
        model(torch.randn(4, 16)).sum().backward()
        p.step()


def test_single_process_run_writes_the_report(tmp_path):
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 4)
    doc = report(tmp_path)
    assert doc["schema"] == "profkit.analysis/1"
    assert doc["run"]["ranks_analyzed"] == [0] and doc["run"]["world_size"] == 1
    assert doc["run"]["status"] == "ok"
    assert (tmp_path / "profkit-report" / "report.txt").is_file()
    assert json.loads((tmp_path / "run.json").read_text())["profiler"]["summarize"] is True


def test_no_report_unless_asked(tmp_path):
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False) as p:
        train(p, 4)
    assert (tmp_path / "traces" / "rank0.pt.trace.json.gz").is_file()
    assert not (tmp_path / "profkit-report").exists()


def test_single_process_failure_propagates_and_is_reported(tmp_path):
    err = ValueError("bad batch")
    with pytest.raises(ValueError) as info:
        with profile(tmp_path, wait=0, warmup=0, active=2, nvml=False, summarize=True) as p:
            train(p, 3)
            raise err
    assert info.value is err
    # the only rank failed: nothing to analyse, so no report, and no error from profkit
    assert not (tmp_path / "profkit-report").exists()


def test_a_failing_summary_never_reaches_the_user(tmp_path, monkeypatch, caplog):
    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(job_summary, "write_bytes_atomic", broken)
    with profile(tmp_path, wait=0, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 4)
    assert "no in-job summary" in caplog.text and "disk full" in caplog.text
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "ok"


def test_no_summary_for_triggered_captures(tmp_path):
    flag = tmp_path / "go"
    with profile(tmp_path, wait=0, warmup=0, active=2, nvml=False, summarize=True,
                 trigger=f"file:{flag}", trigger_every=1) as p:
        for i in range(6):
            if i == 1:
                flag.touch()
            torch.nn.Linear(4, 4)(torch.randn(2, 4)).sum().backward()
            p.step()
    (cap,) = [c for c in tmp_path.iterdir() if c.name.startswith("capture-0-")]
    assert (cap / "traces" / "rank0.pt.trace.json.gz").is_file()
    assert not list(tmp_path.rglob("report.json"))


def test_a_run_without_traces_gets_no_report(tmp_path, caplog):
    with profile(tmp_path, wait=1, warmup=1, active=2, nvml=False, summarize=True) as p:
        train(p, 1)  # ends before the schedule saves a trace
    assert not (tmp_path / "profkit-report").exists()
    assert "wrote no trace" in caplog.text


def test_run_facts_without_a_readable_run_json():
    session = SimpleNamespace(info=SimpleNamespace(host="b"), run_facts={
        "gpus": [{"host": "a", "uuid": "GPU-a"}, {"host": "b", "uuid": "GPU-b"}],
        "clock_offsets_ns": {"0": 0, "1": 7}})
    assert job_summary.run_meta(session, {"gpus": [], "x": 1}) == {"gpus": [], "x": 1}
    assert job_summary.run_meta(session, {}) == {
        "gpus": [{"host": "b", "uuid": "GPU-b"}], "clock_offsets_ns": {"0": 0, "1": 7}}
