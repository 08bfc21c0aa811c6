"""A run without GPU events (torch.profiler with ProfilerActivity.CPU only): one finding
says so, not one per analysis that needs GPU events; the report still shows the CPU ops,
per step; the collectives note says why there is no link peak, and on one host it does not
blame several hosts."""

from __future__ import annotations

import subprocess
import sys

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report.render import to_json, to_text

from tests.conftest import CORPUS

# Two ranks on one host, gloo: 4 steps profiled on the CPU, 3 of them recorded, an
# all_reduce in each.
CAPTURE = """
import os, sys, torch, torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule

def rank(r, out, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=r, world_size=2)
    x, w = torch.randn(64, 64), torch.randn(64, 64, requires_grad=True)
    done = lambda p: p.export_chrome_trace(f"{out}/rank{r}.pt.trace.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1,
                 active=3), on_trace_ready=done) as p:
        for _ in range(4):
            (x @ w).relu().sum().backward()
            dist.all_reduce(w.grad)
            p.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.start_processes(rank, args=(sys.argv[1], sys.argv[2]), nprocs=2, start_method="fork")
"""


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    import socket

    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("gloo") / "run"
    out.mkdir()
    script = out.parent / "capture.py"
    script.write_text(CAPTURE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    proc = subprocess.run([sys.executable, str(script), str(out), port], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]
    return analyze_run(out, workers=1, cache=False)


def no_gpu_findings(a) -> list:
    return [f for f in a.findings if "no gpu events" in f.message.lower()]


def test_one_finding_says_there_are_no_gpu_events(gloo_run):
    [finding] = no_gpu_findings(gloo_run)
    assert finding.category == "input" and "CPU-only" in finding.message
    assert gloo_run.verdict["primary"] is None
    assert gloo_run.verdict["summary"] == "no GPU events in this run: no verdict"
    text = to_text(gloo_run).split("Findings and what to change:")[1]
    findings = [ln for ln in text.splitlines() if ln.startswith("- ")]
    assert any("CPU-only" in f for f in findings)
    # the only other: two live CPU ranks drift apart on a loaded machine (a rank descheduled
    # mid-collective), and their waits can exceed a step: said as a warning of its own
    others = [f for f in findings if "CPU-only" not in f]
    assert all("collective waits exceed the step time" in f for f in others), others


def test_the_cpu_ops_are_shown_per_step(gloo_run):
    ops = gloo_run.table("top_ops").set_index("name")
    assert {"aten::mm", "c10d::allreduce_"} <= set(ops.index)
    text = to_text(gloo_run)
    block = text.split("Top CPU ops (self time per step):")[1].splitlines()
    [mm] = [ln for ln in block if ln.strip().startswith("aten::mm ")]
    # 2 ranks x 3 recorded steps: calls per step are the calls over 6 rank-steps
    assert mm.split()[1] == f"{ops.loc['aten::mm', 'count'] / 6:g}"
    assert to_json(gloo_run)["findings"]


def test_the_collectives_note_on_one_host(gloo_run):
    text = " ".join(to_text(gloo_run).split())
    assert "Collectives (matched across ranks" in text
    assert "several hosts" not in text and "hosts" not in text
    assert "link peak unknown: no GPU events in this run (collectives on the CPU" in text


@pytest.mark.skipif(not (CORPUS / "hta" / "cpu_only").is_dir(), reason="corpus not found")
def test_the_corpus_cpu_only_trace():
    a = analyze_run(CORPUS / "hta" / "cpu_only", workers=1, cache=False)
    assert len(no_gpu_findings(a)) == 1
    assert "Top CPU ops" in to_text(a) and len(a.table("top_ops")) > 0


def test_several_hosts_are_named_as_such():
    """The note for a run across hosts (the one case that says hosts), from the tables."""
    import pandas as pd
    from profkit.analyzers.analyze import Analysis
    from profkit.analyzers.report.sections import collectives_section

    coll = pd.DataFrame({"key": ["a"], "collective": ["all_reduce"], "bytes": [1 << 20],
                         "group_size": [2], "latency_ns": [1e5], "busbw_gbps": [10.0]})
    tables = {"collectives": coll, "collective_links": pd.DataFrame(
        {"key": ["a"], "link_gbps": [float("nan")]}),
        "clock_offsets": pd.DataFrame({"rank": [0, 1], "host": ["a", "b"], "offset_ns": [0, 0]}),
        "efficiency": pd.DataFrame({"rank": [0, 1], "device_model": ["H100 SXM"] * 2,
                                    "device_name": ["NVIDIA H100"] * 2})}
    notes = collectives_section(Analysis({"path": "r"}, {"summary": ""}, tables)).notes
    assert "the ranks run on 2 hosts" in notes[-1]
    tables["clock_offsets"]["host"] = ["a", "a"]
    tables["efficiency"]["device_model"] = ["", ""]
    notes = collectives_section(Analysis({"path": "r"}, {"summary": ""}, tables)).notes
    assert notes[-1] == "link peak unknown: NVIDIA H100: not in profkit's table of GPU links"


def test_launches_without_a_single_gpu_record_are_lost_kernel_records():
    """Issue 40: a trace with CUDA launch calls and no GPU record is no CPU-only trace."""
    import gzip
    import json
    import re
    from pathlib import Path

    run = Path(__file__).resolve().parents[1] / "data" / "kernels_lost"
    doc = json.loads(gzip.decompress((run / "rank0.pt.trace.json.gz").read_bytes()))
    launches = sum(1 for e in doc["traceEvents"] if re.match(
        r"^(cuda|cu)LaunchKernel", str(e.get("name", ""))) and e.get("ph") == "X")
    assert launches and not [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    a = analyze_run(str(run))
    [finding] = [f for f in a.findings if f.category in ("trace", "input")]
    assert finding.category == "trace" and finding.severity == "warning"
    assert finding.message.startswith("kernel records are missing")
    assert finding.evidence["kernel_launches"] == launches
    assert "GPU machine" not in finding.recommendation
    assert "CPU-only" not in to_text(a)
