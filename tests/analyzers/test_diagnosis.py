"""Diagnosis on real captures (samples/runs/diagnosis, 1 x H200) and public traces: transfer-
bound runs, blocking vs merely-waited copies, round trips, step markers, graph capture,
missing kernel records, one-off calls, steady-step selection, and the code the GPU waits for.
Expected numbers come from the capture scripts' own settings and timings (SUMMARY.txt) or from
an independent reading of the raw trace JSON, never from profkit's output."""

from __future__ import annotations

import gzip
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.analyze import analyze
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.measure.steps import choose_steps
from profkit.analyzers.measure.stragglers import tail_probability
from profkit.analyzers.options import AnalysisOptions

from profkit.run.loader import load_run
from tests.analysed import analysed, loaded
from tests.conftest import CORPUS, REPO
from tests.factories import kernel, launch, step, trace_doc, write_trace

DIAG = REPO / "samples" / "runs" / "diagnosis"
ZOO = REPO / "samples" / "runs" / "zoo"


def measured(name: str) -> dict:
    for line in (DIAG / "SUMMARY.txt").read_text().splitlines():
        key, _, payload = line.partition(" PROFKIT_SAMPLE ")
        if key == f"zoo_{name}":
            return json.loads(payload)
    raise KeyError(name)


def raw_events(path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_pinned_upload_is_transfer_bound_at_the_pcie_rate():
    a = analysed(DIAG / "transfer")
    assert a.verdict["primary"] == "memcpy"
    assert a.verdict["summary"].startswith("transfer bound")
    ranks = a.table("rank_breakdown").iloc[0]
    assert ranks["memcpy"] > 0.9 and ranks["host_sync"] < 0.02  # the final synchronize waited on a copy
    # Independently: bytes and GPU time of the HtoD copies in the recorded steps, from the JSON.
    raw = raw_events(DIAG / "transfer" / "traces" / "rank0.pt.trace.json.gz")
    copies = [e for e in raw if e.get("cat") == "gpu_memcpy" and "HtoD" in e["name"]
              and e["dur"] > 1000]
    assert len(copies) == 3 and all(e["args"]["bytes"] == 1024 * 2**20 for e in copies)
    expect_gbps = sum(e["args"]["bytes"] for e in copies) / (sum(e["dur"] for e in copies) * 1e3)
    row = a.table("transfers").set_index(["direction", "memory"]).loc[("HtoD", "Pinned")]
    assert row["achieved_gbps"] == pytest.approx(expect_gbps, rel=0.01)
    # H200: PCIe Gen5 x16 = 16 lanes x 32 GT/s x 128/130 / 8 = 63.0 GB/s
    assert row["peak_gbps"] == pytest.approx(63.0, rel=0.01) and "Gen5 x16" in row["link"]
    finding = next(f for f in a.findings if f.category == "memcpy")
    assert "Move fewer bytes" in finding.recommendation
    assert "pin" not in finding.recommendation.lower()  # the code already pins its memory
    assert not any(f.category == "host_sync" for f in a.findings)


def test_pageable_upload_blocks_the_host_and_the_advice_is_to_pin():
    a = analysed(DIAG / "transfer_pageable")
    assert a.verdict["primary"] == "host_sync"
    finding = next(f for f in a.findings if f.category == "host_sync")
    assert finding.evidence["blocking_copy_share"] > 0.95
    assert "Pin the host memory" in finding.recommendation
    row = a.table("transfers").set_index(["direction", "memory"]).loc[("HtoD", "Pageable")]
    assert row["achieved_gbps"] < 0.5 * row["peak_gbps"]  # staged copies run far below the link


def test_round_trips_are_host_work_after_syncs_not_launch_overhead():
    a = analysed(ZOO / "round_trip")
    assert a.verdict["primary"] == "host_work"
    finding = next(f for f in a.findings if f.category == "host_work")
    assert finding.evidence["after_sync_share"] > 0.9
    assert "blocking synchronisation" in finding.recommendation
    assert "reduce-overhead" not in finding.recommendation  # CUDA graphs cannot help here


def test_a_launch_bound_loop_is_not_a_round_trip():
    a = analysed(ZOO / "cpu_launch")
    finding = next(f for f in a.findings if f.category == "cpu_launch")
    assert finding.evidence["after_sync_share"] < 0.05
    assert "CUDA graphs" in finding.recommendation


def test_steps_from_a_user_annotation():
    """A stock trace without ProfilerStep#: each step is a record_function('train_step')."""
    plain = analysed(DIAG / "marker_steps")
    note = " ".join(plain.run["notes"])
    assert "no ProfilerStep# ranges" in note and "train_step x3" in note
    marked = analyze_run(DIAG / "marker_steps", cache=False, workers=1,
                         options=AnalysisOptions(step_marker="train_step"))
    steps = marked.run["steps"]["0"]
    assert steps["source"] == "marker train_step" and steps["used"] == [0, 1, 2]
    step_ms = marked.table("rank_breakdown")["step_time_ms"].iloc[0]
    assert step_ms == pytest.approx(measured("marker_steps")["median_step_ms"], rel=0.15)


def test_graph_capture_is_not_execution():
    only = analysed(DIAG / "graph_capture_only")
    assert only.verdict["primary"] is None and "graph capture" in only.verdict["summary"].lower()
    assert [f.category for f in only.findings] == ["trace"]
    mixed = analysed(DIAG / "graph_capture")
    steps = mixed.run["steps"]["0"]
    assert steps["used"] == [3, 4]  # step 2 captured the graph, 3 and 4 replayed it
    assert "CUDA graph capture" in steps["excluded"][0]["reason"]


@pytest.mark.skipif(not CORPUS.is_dir(), reason="needs ../shared/corpus")
def test_the_public_vllm_capture_trace_gets_no_launch_verdict():
    path = next((CORPUS / "tracelens" / "inference").rglob("graph_capture*.json.gz"))
    a = analysed(path)
    assert a.verdict["primary"] is None
    assert not any("CUDA graph" in f.recommendation and f.category == "cpu_launch"
                   for f in a.findings)


def test_missing_kernel_records_get_no_verdict(tmp_path):
    """Derived from a real capture: zoo/cpu_launch with its kernel records removed, as CUPTI
    leaves a trace whose activity buffers filled up (launch calls present, no kernels)."""
    doc = json.loads(gzip.decompress((ZOO / "cpu_launch" / "traces" /
                                      "rank0.pt.trace.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    path = write_trace(tmp_path / "rank0.json", doc)
    a = analyze_run(path, cache=False, workers=1)
    assert a.verdict["primary"] is None and "missing" in a.verdict["summary"]
    finding = next(f for f in a.findings if f.category == "trace")
    assert "kernel records are missing" in finding.message
    assert not any(f.category == "cpu_launch" for f in a.findings)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="needs ../shared/corpus")
def test_one_off_calls_are_cut_out_of_a_stepless_window():
    path = CORPUS / "hta" / "critical_path" / "alexnet"
    a = analysed(path)
    notes = " ".join(a.run["notes"])
    # Independently: the longest runtime call in the raw trace is a ~29.9 s
    # cudaDeviceGetStreamPriorityRange (first CUDA call: context creation).
    raw = raw_events(next(path.glob("*.json.gz")))
    longest = max((e for e in raw if e.get("cat") == "cuda_runtime"), key=lambda e: e["dur"])
    assert longest["name"] in notes and "one-off" in notes
    one_offs = a.table("one_off_calls")
    # named by itself, or (issue 40: CPU ops are one-offs too) inside the op that made it
    named = one_offs[S_DUR].where(one_offs["name"] == longest["name"],
                                  one_offs["inner_ns"].where(one_offs["inner"] == longest["name"]))
    assert longest["dur"] * 1000 == pytest.approx(named.max(), abs=1000)


S_DUR = "dur_ns"


def test_steady_steps_leave_out_distorted_edges_and_one_offs():
    table = pd.DataFrame({"step": [1, 2, 3, 4, 5, 6, 7],
                          "step_ns": [150, 100, 102, 210, 98, 101, 160]})
    used, reasons = choose_steps(table, np.zeros(7), None, 0.25)
    assert used.tolist() == [False, True, True, False, True, True, False]
    assert reasons[0].startswith("first recorded step") and reasons[6].startswith("last")
    assert reasons[3].startswith("one-off")
    used, _ = choose_steps(table, np.zeros(7), (1, 3), 0.25)
    assert used.tolist() == [True, True, True, False, False, False, False]
    noisy = pd.DataFrame({"step": [1, 2, 3, 4], "step_ns": [100, 200, 100, 200]})
    used, _ = choose_steps(noisy, np.zeros(4), None, 0.25)
    assert used.all()  # no steady state to speak of: nothing is left out


def test_edge_steps_do_not_drive_the_verdict(tmp_path):
    """Five 1 ms compute steps; the first recorded step starts with 3 ms of idle before its
    kernel (profiler start-up): with it the rank would read 37% cpu_launch."""
    events = []
    for i in range(5):
        t0 = i * 1000.0 if i else -3000.0
        events += [step(i, t0, 1000.0 if i else 4000.0), launch(t0 + 1.0, 1.0, i + 1)]
        events.append(kernel("sm90_xmma_gemm_bf16", (i * 1000.0) + 5.0, 990.0, i + 1))
    path = write_trace(tmp_path / "rank0.json", trace_doc(rank=0, world_size=1, events=events))
    a = analyze(load_run(path, cache=False))
    assert a.run["steps"]["0"]["used"] == [1, 2, 3, 4]
    # each used step: 10 us of launch gaps around a 990 us kernel
    assert a.verdict["primary"] == "compute" and a.verdict["fractions"]["cpu_launch"] < 0.02


def test_the_idle_code_agrees_with_a_brute_force_sampling():
    """Which host range the GPU waits for, checked by sampling idle instants and finding the
    innermost host range on the launching thread by brute force."""
    a = analysed(ZOO / "cpu_launch")
    code = a.table("idle_code")
    share = code.groupby("code")["idle_ns"].sum() / code["idle_ns"].sum()
    launches = sum(share[k] for k in share.index if k.endswith("-> cudaLaunchKernel"))
    run = loaded(ZOO / "cpu_launch")
    ev = run.ranks[0].events
    host = ev[ev["kind"].isin(["cpu_op", "runtime"]) & (ev["tid"] == ev.loc[
        ev["name"] == "cudaLaunchKernel", "tid"].iloc[0])]
    gpu = ev[ev["kind"] == "kernel"].sort_values("ts_ns")
    steps = run.ranks[0].steps
    lo = steps["ts_ns"].min()
    rng = np.random.default_rng(0)
    g_end = (gpu["ts_ns"] + gpu["dur_ns"]).to_numpy()
    hits = total = 0
    starts, ends = host["ts_ns"].to_numpy(), (host["ts_ns"] + host["dur_ns"]).to_numpy()
    names = host["name"].astype(str).to_numpy()
    for t in rng.integers(lo, g_end.max(), 3000):
        k = np.searchsorted(gpu["ts_ns"].to_numpy(), t, side="right") - 1
        if k >= 0 and g_end[k] > t:
            continue  # GPU busy
        cover = np.flatnonzero((starts <= t) & (ends > t))
        if len(cover) == 0:
            continue
        total += 1
        hits += names[cover[np.argmax(starts[cover])]] == "cudaLaunchKernel"
    assert total > 500
    assert launches == pytest.approx(hits / total, abs=0.06)


def test_straggler_p_value_is_the_binomial_tail():
    """With n ranks each equally likely last, P(last >= k of m) is a binomial tail."""
    def binom_tail(m, k, p):
        return float(sum(math.comb(m, i) * Fraction(p) ** i * (1 - Fraction(p)) ** (m - i)
                         for i in range(k, m + 1)))

    assert tail_probability(np.full(50, 0.5), 31) == pytest.approx(binom_tail(50, 31, 0.5))
    assert tail_probability(np.full(50, 0.5), 31) > 0.05  # 62% of 50 is chance for 2 ranks
    assert tail_probability(np.full(40, 0.125), 12) == pytest.approx(binom_tail(40, 12, 0.125))
    assert tail_probability(np.full(5000, 0.5), 2600) == pytest.approx(
        binom_tail(5000, 2600, 0.5), rel=0.05)


def test_balanced_run_has_a_rank_always_last_but_no_straggler():
    """zoo/balanced: rank 0 starts every all_reduce last (p < 0.001) but costs the other
    0.7% of its step: significant, not costly, so not flagged."""
    a = analysed(ZOO / "balanced")
    table = a.table("stragglers").set_index("rank")
    assert table.loc[0, "p_value"] < 1e-3 and not table["straggler"].any()


PUBLIC = REPO / "tests" / "data" / "public"


def test_public_resnet_pageable_first_batch_is_host_sync_not_launch():
    """tests/data/public/resnet50_nw4 (kineto's TensorBoard-plugin sample, V100): the first
    recorded step waits ~36 ms inside a pageable HtoD cudaMemcpyAsync (the independent
    checker: a 45 ms gap, 36.4 ms of it in that call). It is host_sync (and the step is left
    out as profiler start-up), not cpu_launch with CUDA-graph advice."""
    a = analysed(PUBLIC / "resnet50_nw4")
    steps = a.table("step_breakdown").set_index("step")
    assert steps.loc[5, "host_sync"] > 30e6 and steps.loc[5, "cpu_launch"] < steps.loc[5, "host_sync"]
    info = a.run["steps"]["0"]
    assert 5 not in info["used"] and info["excluded"][0]["reason"].startswith("first recorded")
    assert a.verdict["primary"] == "compute"


def test_public_resnet_workers_0_waits_in_the_dataloader():
    a = analysed(PUBLIC / "resnet50_nw0")
    code = a.table("idle_code")
    top = code[code["part"] == "data_loading"].nlargest(1, "idle_ns")["code"].iloc[0]
    assert top == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    finding = next(f for f in a.findings if f.category == "data_loading")
    assert 0.25 < finding.estimated_saving["fraction"] < 0.45  # the checker: ~1/3 of the step


def test_public_capture_and_lost_record_traces_get_no_verdict():
    capture = analysed(PUBLIC / "sglang_decode_capture")
    assert capture.verdict["primary"] is None and "capture" in capture.verdict["summary"]
    lost = analysed(PUBLIC / "hta_cupti_range")
    assert lost.verdict["primary"] is None and "missing" in lost.verdict["summary"]
    assert not any("ProfilerActivity.CUDA" in f.recommendation for f in lost.findings)


WHY = REPO / "samples" / "runs" / "why"


@pytest.mark.parametrize(("name", "host_ms"), [
    ("cpu_optimizer", 57.0), ("preprocess", 51.3), ("graph_hooks", 12.06)])
def test_host_work_is_not_launch_overhead(name, host_ms):
    """samples/runs/why (H100): a CPU Adam step, CPU preprocessing in the loop and Python
    between CUDA-graph replays. The workloads timed their own host phase (host_ms per step,
    SUMMARY.txt / README): the verdict is host work, most of the host phase is charged to
    it, and no advice to use CUDA graphs or to fuse launches is given."""
    a = analysed(WHY / name)
    assert a.verdict["primary"] == "host_work", a.verdict["summary"]
    ranks = a.table("rank_breakdown").iloc[0]
    charged_ms = ranks["host_work"] * ranks["step_time_ms"]
    assert charged_ms >= 0.6 * host_ms  # the rest overlaps GPU work (not idle) or is launching
    text = " ".join(f.recommendation for f in a.findings)
    assert "reduce-overhead" not in text and "torch.cuda.graphs" not in text


@pytest.mark.parametrize("run", ["issue40/shard_wait", "memory/varlen_expandable",
                                 "why/graph_hooks", "why/recompile_fixed", "zoo/round_trip"])
def test_the_code_the_gpu_waits_on_never_exceeds_its_part(run):
    """The code named in a part's finding (``code_idle_ms_per_step``) is part of the part's
    time, so never more than it, in the same ms: both are shares of the used steps' time in
    ms of the median step. These five runs read more before (shard_wait: the GPU idled 19.9
    ms/step in the DataLoader of a 10.4 ms/step data-loading part: the code per mean step,
    the part per median step)."""
    a = analysed(REPO / "samples" / "runs" / run)
    cited = [f for f in a.findings if "code_idle_ms_per_step" in f.evidence]
    assert cited
    for f in cited:
        assert f.evidence["code_idle_ms_per_step"] <= f.evidence["ms_per_step"] + 1e-3, f


def test_graph_replays_are_never_told_to_use_cuda_graphs():
    """why/graph_hooks replays CUDA graphs (cudaGraphLaunch): whatever bounds it, no finding
    recommends capturing CUDA graphs."""
    a = analysed(WHY / "graph_hooks")
    for f in a.findings:
        assert "CUDA graph" not in f.recommendation or "already" in f.recommendation, f


def test_findings_agree_with_their_evidence():
    """transfer_pageable: the code the GPU idles on is evidence of the host-sync finding, not
    a second finding with a smaller 'host sync' figure (0.13 ms/step beside 26.3 ms/step);
    graph_capture_only: the message and the evidence count the same launches."""
    a = analysed(DIAG / "transfer_pageable")
    assert not [f for f in a.findings if f.category == "idle_code"]
    (sync,) = [f for f in a.findings if f.category == "host_sync"]
    assert "cudaMemcpyAsync" in sync.evidence["code"]
    assert sync.evidence["code_idle_ms_per_step"] <= sync.evidence["ms_per_step"]
    b = analysed(DIAG / "graph_capture_only")
    (trace,) = [f for f in b.findings if f.category == "trace"]
    assert f"{trace.evidence['captured_launches']} launches captured" in trace.message


def test_a_trace_without_steps_has_no_median_step():
    """diagnosis/marker_steps without --step-marker: no ProfilerStep#, so the verdict speaks
    of one window, never of a 'median step' (the window held three train_step ranges)."""
    a = analysed(DIAG / "marker_steps")
    assert "median step" not in a.verdict["summary"]
    assert "window (no steps recorded)" in a.verdict["summary"]
    assert a.verdict["median_step_ms"] is None
