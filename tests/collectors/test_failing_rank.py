"""A rank that fails for good never hangs the job: real 2-process gloo DDP jobs on CPU
under torchrun where one rank raises in the middle of training.

The other rank then waits in its next DDP all-reduce for a peer that is gone; it must
learn that (the peer's connection closes, or torchrun stops it) instead of meeting a
collective of profkit's, and every rank's status must reach the disk.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from profkit.collectors.in_job import summarize as job_summary

TIMEOUT_S = 20  # PROFKIT_SUMMARY_TIMEOUT_S of these jobs: the bound they must end within
FAIL_STEP = 6  # the failing rank raises before this step (a trace was saved after step 4)
LEAVE_S = 5  # the failing rank's exception reaches the user's code this soon

JOB = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from profkit.collectors import profile

    out, fail_rank, fail_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        with profile(out + "/run", wait=1, warmup=1, active=2, nvml=False,
                     summarize=sys.argv[4] == "1") as p:
            for step in range(1000):  # never ends alone: each step all-reduces with the peer
                if rank == fail_rank and step == fail_step:
                    with open(f"{out}/raised", "w") as f:
                        f.write(str(time.time_ns()))
                    raise RuntimeError(f"boom on rank {rank} at step {step}")
                model(torch.randn(16, 32)).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
                p.step()
    except BaseException as e:
        with open(f"{out}/rank{rank}.caught", "w") as f:
            f.write(f"{time.time_ns()} {type(e).__name__}")
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(1)  # as a failed job would end, without torch's teardown
    os._exit(0)
""")


def run_failing_job(tmp_path, torchrun, fail_rank, summarize):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    r = torchrun(script, tmp_path, fail_rank, FAIL_STEP, int(summarize),
                 env={job_summary.TIMEOUT_ENV: str(TIMEOUT_S)}, timeout_s=90)
    assert r.returncode is not None, "the job hung: " + r.stderr[-3000:]
    assert r.returncode != 0  # a rank failed, so the job did
    return tmp_path / "run"


def statuses(run_dir):
    return {r: json.loads((run_dir / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)}


def check_ended_in_time(tmp_path, run_dir, fail_rank):
    raised_ns = int((tmp_path / "raised").read_text())
    caught_ns, caught_type = (tmp_path / f"rank{fail_rank}.caught").read_text().split()
    assert caught_type == "RuntimeError"
    assert int(caught_ns) - raised_ns < LEAVE_S * 1e9  # it did not wait for anyone
    for status in statuses(run_dir).values():  # and every rank stopped within the bound
        assert status["ended_ns"] - raised_ns < TIMEOUT_S * 1e9, status


@pytest.mark.parametrize("summarize", [
    True, pytest.param(False, marks=pytest.mark.slow)])  # without a summary: main never hung
def test_rank_1_raising_mid_training_ends_the_job_with_both_statuses(tmp_path, torchrun,
                                                                     summarize):
    run_dir = run_failing_job(tmp_path, torchrun, 1, summarize)
    check_ended_in_time(tmp_path, run_dir, 1)
    st = statuses(run_dir)
    assert st[1]["status"] == "failed" and st[1]["error"] == {
        "type": "RuntimeError", "message": f"boom on rank 1 at step {FAIL_STEP}"}
    # rank 0 lost its peer in the DDP all-reduce: gloo's error (the peer's connection
    # closed), or torchrun's SIGTERM, whichever came first
    assert st[0]["status"] == "failed" and st[0]["error"]["type"], st[0]
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "failed" and run_json["error"] == st[0]["error"]
    # rank 0 failed too, so nobody is left to write a report
    assert not (run_dir / "profkit-report").exists()


def test_rank_0_raising_mid_training_writes_no_report_and_waits_for_nobody(tmp_path, torchrun):
    run_dir = run_failing_job(tmp_path, torchrun, 0, True)
    check_ended_in_time(tmp_path, run_dir, 0)
    st = statuses(run_dir)
    assert st[0]["status"] == "failed" and st[0]["error"]["type"] == "RuntimeError"
    assert st[1]["status"] == "failed" and st[1]["error"]["type"], st[1]
    run_json = json.loads((run_dir / "run.json").read_text())
    assert run_json["status"] == "failed"
    assert run_json["error"]["message"] == f"boom on rank 0 at step {FAIL_STEP}"
    assert not (run_dir / "profkit-report").exists()
