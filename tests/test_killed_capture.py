"""A capture killed before it saved its traces: `profkit analyze` says the run is still
marked running and names the partial traces (rank, cycle, whether their writer is gone);
the next capture into the folder removes what dead writers left, never what a live one
still writes."""

import json
import os
import shutil
import subprocess
import sys
import time

from profkit import atomic
from profkit.cli import main
from tests.realruns import copy_run


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def partial(folder, target: str, pid: int, suffix: str = ""):
    """A temporary as profkit's writers name it (profkit.atomic.tmp_name), left half-written."""
    path = folder / f".tmp-{target}.{pid}-{atomic.machine_tag()}.0123abcd{suffix}"
    path.write_bytes(b'{"traceEvents": [')
    return path


def killed_run(tmp_path, pid: int):
    """zoo/straggler as a capture killed while rank 1 saved its second cycle: run.json
    still running, no trace saved, Kineto's export and its own temporary left behind."""
    run = copy_run("zoo/straggler", tmp_path / "run")
    shutil.rmtree(run / "traces")
    (run / "traces").mkdir()
    meta = json.loads((run / "run.json").read_text())
    meta.update(status="running", ended_ns=None)
    (run / "run.json").write_text(json.dumps(meta))
    left = [partial(run / "traces", "rank1.cycle2.pt.trace.json.gz", pid, ".json"),
            partial(run / "traces", "rank1.cycle2.pt.trace.json.gz", pid, ".json.tmp"),
            partial(run, "reserve-rank1", pid)]
    return run, left


def test_analyze_of_a_killed_capture_says_it_is_still_running_and_names_the_partial(
        tmp_path, capsys):
    pid = dead_pid()
    run, _ = killed_run(tmp_path, pid)
    assert main(["analyze", str(run), "--no-cache"]) == 4
    err = capsys.readouterr().err
    assert "no trace files (.json or .json.gz) found" in err
    assert 'run.json says the capture is still running (status "running")' in err
    assert (f"partial traces, never finished: rank 1 cycle 2 (traces/.tmp-rank1.cycle2.pt.trace"
            f".json.gz.{pid}-{atomic.machine_tag()}.0123abcd.json: its writer, process {pid}, "
            "is gone)") in err


def test_the_next_capture_removes_what_a_killed_one_left_and_keeps_a_live_writers(tmp_path):
    from profkit.collectors.run_dir_writes import check_output_dir

    run, left = killed_run(tmp_path, dead_pid())
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        kept = partial(run / "traces", "rank0.pt.trace.json.gz", live.pid, ".json.tmp")
        old = time.time() - 3600
        for path in [*left, kept]:
            os.utime(path, (old, old))
        check_output_dir(run)  # what every capture into a folder does first
        assert not any(p.exists() for p in left) and kept.exists()
    finally:
        live.kill()
        live.wait()

