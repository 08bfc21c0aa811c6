"""``profkit ncu`` on a real GPU (marked gpu: run on the device, needs ncu and CUDA): the
"why" zoo workloads captured on this GPU, then rerun under Nsight Compute, and the analysis
joining the counters to the trace's kernels. (The captures in samples/runs/why are an H100's:
another GPU runs other cuBLAS kernels, so the join needs a trace of the GPU that ncu
measures.)

- eltwise_chain (memory-bound elementwise chain): its kernels near the DRAM roof, and the
  DRAM bytes of a step close to the tensor bytes the workload counts itself;
- precision (fp32 GEMMs, TF32 off) vs precision --bf16: tensor pipes idle vs busy;
- the join names the trace's kernels, with ncu's duration close to the trace's.

``PROFKIT_NCU_PROOF_DIR`` set: each run's report, JSON and ncu files are copied there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from profkit.analyzers.executor import analyze_run
from profkit.analyzers.report.render import to_json, to_text

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
ZOO = REPO / "samples" / "zoo"
# (run captured from it, its command, profkit ncu options): every kernel of the eltwise
# step (13), the top 5 of the others
WORKLOADS = {
    "eltwise_chain": ("eltwise_chain", ["eltwise_chain.py", "--steps", "8"],
                      ["--max-kernels", "13"]),
    "precision_fp32": ("precision", ["precision.py", "--steps", "10"], []),
    "precision_bf16": ("precision_fixed", ["precision.py", "--bf16", "--steps", "10"], []),
}


def _ncu_ready() -> str | None:
    if not shutil.which("ncu"):
        return "no ncu on PATH"
    try:
        import torch
    except ImportError:
        return "no torch"
    return None if torch.cuda.is_available() else "no CUDA GPU"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """{workload: (analysis, the workload's PROFKIT_SAMPLE facts, ncu.json)}, measured once."""
    why = _ncu_ready()
    if why:
        pytest.skip(why)
    out = {}
    proof = os.environ.get("PROFKIT_NCU_PROOF_DIR")
    for name, (run, script, options) in WORKLOADS.items():
        copy = tmp_path_factory.mktemp(name) / run
        capture = [sys.executable, str(ZOO / script[0]), "--profiler", "profkit", "--out",
                   str(copy), *script[1:]]
        done = subprocess.run(capture, capture_output=True, text=True, timeout=400,
                              cwd=copy.parent)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        cmd = [sys.executable, "-m", "profkit", "ncu", str(copy), *options, "--", sys.executable,
               str(ZOO / script[0]), "--profiler", "none", *script[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=400,
                              cwd=copy.parent)  # not the checkout: its bare profkit/
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        sample = next(json.loads(ln.split(" ", 1)[1]) for ln in done.stdout.splitlines()
                      if ln.startswith("PROFKIT_SAMPLE "))
        analysis = analyze_run(copy, workers=1, cache=False)
        meta = json.loads((copy / "ncu" / "ncu.json").read_text())
        out[name] = (analysis, sample, meta)
        if proof:
            dest = Path(proof) / name
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "console.txt").write_text(done.stdout[-20000:] + "\n--- stderr\n"
                                              + done.stderr[-20000:])
            (dest / "report.txt").write_text(to_text(analysis))
            (dest / "report.json").write_text(json.dumps(to_json(analysis), indent=1))
            for f in ("ncu.json", "counters.csv", "ncu.log"):
                shutil.copy(copy / "ncu" / f, dest / f)
    return out


def _table(measured, name):
    return measured[name][0].table("ncu_kernels")


def test_elementwise_kernels_are_near_the_dram_roof(measured):
    k = _table(measured, "eltwise_chain")
    assert len(k) == 13
    # the vectorized elementwise kernels stream at the DRAM roof on an H100 and an H200; the
    # broadcasting (non-vectorized) ones and the softmax do on an H100 (3.35 TB/s) but not
    # on an H200 (4.8 TB/s), where they run out of issue slots first (SM 59-73%, DRAM 51-57%)
    vec = k[k["kernel"].str.contains("vectorized_elementwise_kernel")]
    assert len(vec) >= 9
    assert (vec["measured_bound"] == "memory").all(), vec[["short_name", "measured_bound"]]
    assert vec["dram_pct"].min() >= 80
    assert (k["measured_bound"] == "memory").sum() >= 10 and k["dram_pct"].median() >= 80
    others = k[k["measured_bound"] != "memory"]  # what is not memory-bound says why
    assert (others["sm_pct"] > others["dram_pct"] - 5).all(), others
    assert any(f.category == "hbm_roof" for f in measured["eltwise_chain"][0].findings)


def test_dram_bytes_of_a_step_match_what_the_workload_counts(measured):
    analysis, sample, _ = measured["eltwise_chain"]
    k = analysis.table("ncu_kernels")
    top = analysis.table("top_kernels").set_index("name")
    steps = int(analysis.table("efficiency")["steps"].sum())
    assert len(k) == len(top) == 13  # every kernel of the step was measured
    per_step = (k["dram_bytes"] * k["kernel"].map(top["count"]) / steps).sum()
    # the 16 ops' tensor bytes as the workload counts them (9.66 GB)
    assert per_step == pytest.approx(sample["eager_tensor_bytes"], rel=0.15)
    assert (k["dram_bytes"] > 0.9 * 2 * 256 * 2**20).all()  # at least one read + one write


def test_bf16_gemms_use_tensor_pipes_and_fp32_ones_do_not(measured):
    fp32, bf16 = _table(measured, "precision_fp32"), _table(measured, "precision_bf16")
    fp32_gemm = fp32[fp32["short_name"].str.contains("gemm")]
    bf16_gemm = bf16[bf16["short_name"].str.contains("gemm")]
    assert len(fp32_gemm) == 3 and len(bf16_gemm) == 3
    assert (fp32_gemm["tensor_pct"] < 1).all() and (fp32_gemm["fma_pct"] > 50).all()
    assert (fp32_gemm["measured_bound"] == "math").all()
    assert (bf16_gemm["tensor_pct"] > 50).all()
    findings = measured["precision_fp32"][0].findings
    assert any(f.category == "precision" and "ncu" in f.evidence for f in findings)


def test_the_join_names_the_traces_kernels(measured):
    for name, (analysis, _, meta) in measured.items():
        k = analysis.table("ncu_kernels")
        names = set(analysis.table("top_kernels")["name"])
        chosen = [c["name"] for c in meta["kernels"]]
        assert set(k["kernel"]) <= names
        assert set(chosen) <= set(k["kernel"]), name  # each chosen kernel was measured
        # the same kernels take the same time: ncu's median launch against the trace's mean
        # (a kernel run at several sizes, a copy, say, may differ: most must agree)
        ratio = (k["ncu_us"] / k["trace_us"])[k["trace_us"] > 20]  # not launch-overhead sized
        close = ratio.between(0.75, 1.33)
        assert close.mean() >= 0.75 and 0.85 < ratio.median() < 1.15, \
            k[["short_name", "trace_us", "ncu_us"]]
        # three launches of each chosen kernel (its own launch configuration), not of its
        # function: 13 instantiations of vectorized_elementwise_kernel are 13 kernels
        launches = k.set_index("kernel")["launches"]
        assert (launches[chosen] >= 3).all(), k[["short_name", "launches"]]
