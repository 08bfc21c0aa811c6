"""SIGTERM during a capture (real subprocess): capture saved, previous handler chained."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

JOB = textwrap.dedent("""
    import signal, sys, time, torch
    from pathlib import Path
    from profkit.collectors import profile
    out, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "chain":
        def prev(signum, frame):
            (out / "prev_called").write_text(str(signum))
            sys.exit(3)
        signal.signal(signal.SIGTERM, prev)
    model = torch.nn.Linear(8, 8)
    with profile(out / "run", wait=0, warmup=0, active=1000, nvml=False) as p:
        for i in range(100000):
            model(torch.randn(2, 8)).sum().backward()
            p.step()
            if i == 3:
                (out / "ready").write_text("1")
            time.sleep(0.01)
""")


@pytest.mark.parametrize("mode,rc", [("default", -signal.SIGTERM), ("chain", 3)])
def test_sigterm_saves_capture(tmp_path, trace_reader, mode, rc):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), mode])
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None, "job died early"
        assert time.monotonic() < deadline, "job never got ready"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == rc
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["status"] == "failed"
    assert doc["error"]["type"] == "signal.SIGTERM"
    trace = trace_reader.read(tmp_path / "run" / "traces" / "rank0.pt.trace.json.gz")
    assert {"ProfilerStep#0", "ProfilerStep#3"} <= trace_reader.names(trace)
    if mode == "chain":
        assert (tmp_path / "prev_called").read_text() == str(int(signal.SIGTERM))
