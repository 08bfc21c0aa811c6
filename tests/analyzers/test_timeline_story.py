"""Stories that fit the timeline (issue 40, item 3), and an eager softmax that wants SDPA
(item 7), on TraceLens's H100 TimeSformer trace (tests/data/public/tracelens_h100_timesformer,
MIT).

Its one step opens with a 14 us cudaDeviceSynchronize while the GPU is idle, then 218 ms of
video preprocessing on the host before the step's first GPU event. No GPU work preceded that
sync in the step, so it waited for nothing: the host work after it is no round trip ("the
host waits for GPU results, then works on them"), it is preprocessing in the loop. The round
trips of samples/runs/zoo/round_trip keep their story (tests/analyzers/test_diagnosis.py).
"""

from __future__ import annotations

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc

RUN = REPO / "tests" / "data" / "public" / "tracelens_h100_timesformer"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def raw() -> list[dict]:
    (trace,) = RUN.glob("*.json.gz")
    return [e for e in read_doc(trace)["traceEvents"] if e.get("ph") == "X"]


def test_host_work_before_the_first_kernel_after_an_idle_sync_is_no_round_trip():
    ev = raw()
    step = next(e for e in ev if e["name"].startswith("ProfilerStep#")
                and e.get("cat") == "user_annotation")
    lo = step["ts"]
    first_gpu = min(e["ts"] for e in ev if e.get("cat") in GPU_CATS and e["ts"] >= lo)
    syncs = [e for e in ev if e.get("cat") == "cuda_runtime" and "ynchronize" in e["name"]
             and lo <= e["ts"] < first_gpu]
    # independently: one short sync at the step's start, with no GPU work before it
    assert len(syncs) == 1 and syncs[0]["dur"] < 50 and first_gpu - lo > 200_000
    assert not [e for e in ev if e.get("cat") in GPU_CATS and lo <= e["ts"] < syncs[0]["ts"]]
    (f,) = [f for f in analysed(RUN).findings if f.category == "host_work"]
    assert f.evidence["after_sync_share"] < 0.05
    assert "blocking sync" not in f.message and "follows a blocking" not in f.recommendation
    assert "normalize" in str(f.evidence.get("code", ""))  # the preprocessing, named


def test_an_eager_softmax_over_large_scores_gets_sdpa_advice():
    ev = raw()
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    softmax = sum(e["dur"] for e in kernels if "SoftMax" in e["name"])
    assert softmax > 0.4 * sum(e["dur"] for e in kernels)  # 44% of kernel time
    scores = {tuple(e["args"]["Input Dims"][0]) for e in ev
              if e.get("cat") == "cpu_op" and e["name"] == "aten::_softmax"}
    assert (8, 12, 3137, 3137) in scores
    (f,) = [f for f in analysed(RUN).findings if f.category == "attention"]
    assert "scaled_dot_product_attention" in f.recommendation
    assert f.evidence["seq"] == 3137 and f.evidence["heads_x_batch"] == 96
    assert not f.evidence["training"] and "backward" not in f.message
    assert 0 < f.estimated_saving["ms_per_step"] < f.evidence["attention_ns"] / 1e6
