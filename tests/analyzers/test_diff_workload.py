"""What tells one model and batch from another (analyzers/measure/signature.py), and how two
are compared (analyzers/compare/workload.py): hand-built traces and workloads, every
expected value chosen by hand."""

import numpy as np
import pandas as pd
from profkit.analyzers.compare import workload as W
from profkit.analyzers.measure.signature import step_signature

from profkit.run.loader import load_run
from tests.factories import kernel, launch, step, trace_doc, write_trace, x


def op(name, ts, dur, dims, types=None, tid=100):
    args = {"Input Dims": dims}
    if types:
        args["Input type"] = types
    return x(name, "cpu_op", ts, dur, tid=tid, **args)


def model_step(n: int, t0: float, batch: int) -> list[dict]:
    """One step at t0 (us): token ids -> embedding -> an autocast linear (recorded twice, the
    inner call inside the outer) -> layer norm, a user range and a module range."""
    return [
        step(n, t0, 900.0),
        op("aten::random_", t0 + 5, 5, [[batch, 9]]),
        x("profkit/forward", "user_annotation", t0 + 20, 600),
        x("nn.Module: Net_0", "python_function", t0 + 20, 600),
        op("aten::embedding", t0 + 30, 20, [[100, 16], [batch, 8], [], [], []]),
        op("aten::linear", t0 + 60, 100, [[batch, 8, 16], [32, 16], [32]], ["float", "float", "float"]),
        op("aten::linear", t0 + 70, 80, [[batch, 8, 16], [32, 16], [32]],
           ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"]),
        op("aten::layer_norm", t0 + 200, 50, [[batch, 8, 32], [], [32], [32], [], []]),
        x("Optimizer.step#SGD.step", "user_annotation", t0 + 700, 100),
        launch(t0 + 300, 5, corr=n),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", t0 + 310, 100, corr=n),
    ]


def test_step_signature_counts_each_module_op_once(tmp_path):
    events = model_step(1, 0.0, 4) + model_step(2, 1000.0, 4)
    path = write_trace(tmp_path / "t.json", trace_doc(rank=0, world_size=1, events=events))
    ev = load_run(path, cache=False).ranks[0].events
    t = step_signature(0, ev, np.ones(len(ev), bool))
    params = t[t["role"] == "param"].set_index(["name", "shape"])["count"]
    # the linear's weight and bias once per step (the autocast copy inside is not a layer)
    assert params.to_dict() == {("aten::embedding", "100x16"): 2, ("aten::layer_norm", "32"): 4,
                                ("aten::linear", "32"): 2, ("aten::linear", "32x16"): 2}
    inputs = t[t["role"] == "input"]
    assert inputs[["step", "name", "shape"]].values.tolist() == [
        [1, "aten::embedding", "4x8"], [2, "aten::embedding", "4x8"]]
    assert t.loc[t["role"] == "first", "shape"].tolist() == ["4x9", "4x9"]
    names = t[t["role"].isin(["annotation", "module"])].set_index("name")["count"].to_dict()
    assert names == {"profkit/forward": 2, "Optimizer.step#SGD.step": 2, "nn.Module: Net_0": 2}


def test_parameter_shapes_are_listed_by_name_then_shape(tmp_path):
    """The param rows in the order grouping (name, shape) gives, counts summed per pair
    over the steps and the pairs of ops whose dims repeat (int64)."""
    events = model_step(1, 0.0, 4) + model_step(2, 1000.0, 8) + model_step(3, 2000.0, 4)
    path = write_trace(tmp_path / "t.json", trace_doc(rank=0, world_size=1, events=events))
    ev = load_run(path, cache=False).ranks[0].events
    t = step_signature(0, ev, np.ones(len(ev), bool))
    params = t[t["role"] == "param"]
    assert params[["name", "shape", "count"]].values.tolist() == [
        ["aten::embedding", "100x16", 3], ["aten::layer_norm", "32", 6],
        ["aten::linear", "32", 3], ["aten::linear", "32x16", 3]]
    assert str(params["count"].dtype) == "int64" and (params["step"] == -1).all()


def test_step_signature_without_shapes_keeps_the_names():
    ev = pd.DataFrame({"ts_ns": [0], "dur_ns": [5], "name": pd.Categorical(["my_range"]),
                       "kind": pd.Categorical(["annotation"]), "tid": [1]})
    t = step_signature(3, ev, np.ones(1, bool))
    assert t[["rank", "role", "name", "count"]].values.tolist() == [[3, "annotation", "my_range", 1]]


def block_model(blocks: int, forwards: float = 1.0) -> dict[str, float]:
    per_block = {"linear 3072x1024": 1, "linear 1024x1024": 1, "layer_norm 1024": 2}
    out = {k: v * blocks * forwards for k, v in per_block.items()}
    out["embedding 8192x1024"] = forwards
    return out


def test_parameters_same_scaled_or_another_model():
    same = W.compare_params(W.Workload(block_model(4)), W.Workload(block_model(4)))
    assert same.status == W.SAME
    scaled = W.compare_params(W.Workload(block_model(4, 12)), W.Workload(block_model(4, 13)))
    assert scaled.status == W.SCALED and "12 -> 13 forward passes per step" in scaled.text
    other = W.compare_params(W.Workload(block_model(4)), W.Workload(block_model(6)))
    assert other.status == W.DIFFER
    assert other.text.startswith("parameter shapes differ: 4 vs 6 blocks (linear 1024x1024, "
                                 "3072x1024: 4 vs 6 per step)")
    wider = W.compare_params(W.Workload({"linear 1024x1024": 2}), W.Workload({"linear 2048x2048": 2}))
    assert wider.text == ("parameter shapes differ: linear 1024x1024 only in base, "
                          "linear 2048x2048 only in new")
    hidden = W.compare_params(W.Workload(block_model(4)), W.Workload())
    assert hidden.status == W.UNKNOWN and "not recorded in new" in hidden.text


def test_inputs_batch_tokens_or_unknown():
    def steps(op, shape, n=3):
        return W.Workload(inputs=[(op, shape)] * n)

    batch = W.compare_inputs(steps("aten::embedding", "8x512"), steps("aten::embedding", "32x512"))
    assert batch.status == W.BATCH and batch.detail == {"samples": [8, 32], "tokens": [4096, 16384],
                                                        "unit": "sample"}
    longer = W.compare_inputs(steps("aten::linear", "8x512x64"), steps("aten::linear", "8x1024x64"))
    assert longer.status == W.BATCH and longer.detail["unit"] == "token"
    assert longer.detail["tokens"] == [4096, 8192] and "beyond the batch" in longer.text
    images = W.compare_inputs(steps("aten::conv2d", "64x3x224x224"), steps("aten::conv2d", "64x3x160x160"))
    assert images.status == W.DIFFER and images.detail["samples"] == [64, 64]
    # other used steps of the same shapes (one side left a step out): the same
    assert W.compare_inputs(steps("aten::linear", "8x16", 3), steps("aten::linear", "8x16", 2)).status == W.SAME
    # the model's ops hidden on one side (compiled): the first tensor of the step decides
    eager = W.Workload(inputs=[("aten::layer_norm", "16x64")], firsts=["16x64"])
    compiled = W.Workload(firsts=["16x64"])
    assert W.compare_inputs(eager, compiled).status == W.SAME
    assert W.compare_inputs(eager, W.Workload(firsts=["32x64"])).status == W.UNKNOWN
    assert W.compare_inputs(W.Workload(), W.Workload()).status == W.UNKNOWN


def test_framework_ranges_are_not_user_annotations():
    user = ["profkit/prefill", "train_step"]
    framework = ["Optimizer.step#AdamW.step", "## Call CompiledFxGraph abc ##",
                 "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                 "inductor_compile_data: fn_name=compile_fx_inner, compile_id=0/3",
                 "DistributedDataParallel.forward", "nccl:all_reduce"]
    assert [n for n in user + framework if not W.FRAMEWORK_RANGE_RE.search(n)] == user
    differ = W.compare_names("user annotations", {"a": 1, "b": 1}, {"a": 1, "c": 1})
    assert differ.status == W.DIFFER and differ.text == "user annotations differ: b only in base; c only in new"
