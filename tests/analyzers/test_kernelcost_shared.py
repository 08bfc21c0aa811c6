"""kernel_costs' tables made once per rank (the ops' families, the kernel names' precisions)
give what working them out for each set of kernels gives: op_family of each kernel's op
name, kernel_precision of each kernel's name, on samples inference/hf_eager and sets of its
kernels."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from profkit.analyzers.measure.kernelcost import _precisions, kernel_costs
from profkit.analyzers.measure.tables import kernels_of

from profkit import schema as S
from profkit.classify.flops import kernel_precision
from profkit.classify.opfamilies import op_family
from profkit.run.loader import load_run

TRACE = Path(__file__).resolve().parents[2] / "samples" / "runs" / "inference" / "hf_eager"


@pytest.mark.parametrize("shared", [True, False])
def test_families_and_precisions_are_each_kernels_own(shared):
    rd = next(iter(load_run(TRACE, cache=False).ranks.values()))
    with rd.sharing_selections() if shared else _nothing():
        kernels = kernels_of(rd)
        for subset in (kernels, kernels.iloc[::7], kernels[kernels[S.SUBCLASS] == "gemm"],
                       rd.gpu_events):
            costs = kernel_costs(rd, subset)
            want_family = [op_family(str(op)) if isinstance(op, str) else "" for op in costs["op"]]
            assert costs["family"].tolist() == want_family
            names = subset[S.NAME]
            want = [kernel_precision(str(n)) if isinstance(n, str) else "" for n in names]
            assert _precisions(rd, names).tolist() == want
    assert len(kernels) > 100 and (costs["op"] != "").any()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_the_precision_table_is_read_only_for_the_ranks_own_names():
    rd = next(iter(load_run(TRACE, cache=False).ranks.values()))
    names = pd.Series(pd.Categorical(["sm80_xmma_gemm_bf16bf16", None], categories=[
        "sm80_xmma_gemm_bf16bf16", "other"]))
    with rd.sharing_selections():
        got = _precisions(rd, names)
    assert got.tolist() == [kernel_precision("sm80_xmma_gemm_bf16bf16"), ""]
    assert np.asarray(got).dtype == object


def test_precision_and_unknown_costs_follow_each_kernels_op():
    """Per kernel, from its own op (by External id and step): a half-width kernel name takes
    its op's bf16 / fp16, else the name's precision or the op's dtype; a matmul-family op
    without FLOPs leaves the kernel's bytes unknown (NaN)."""
    from profkit.analyzers.measure.kernelcost import MATMUL_FAMILIES, launching_ops

    from profkit.classify.flops import HALF_WIDTH
    rd = next(iter(load_run(TRACE, cache=False).ranks.values()))
    with rd.sharing_selections():
        kernels = kernels_of(rd)
        for subset in (kernels, kernels.iloc[::5], kernels[kernels[S.SUBCLASS] == "gemm"]):
            costs = kernel_costs(rd, subset)
            ops = launching_ops(rd, subset).set_index([S.EXTERNAL_ID, S.STEP])
            unknown, seen = 0, 0
            for i, (ext, step, name) in enumerate(zip(subset[S.EXTERNAL_ID], subset[S.STEP],
                                                      subset[S.NAME])):
                op = ops.loc[(ext, step)] if (ext, step) in ops.index else None
                dtype = op[S.FLOPS_DTYPE] if op is not None else ""
                named = kernel_precision(str(name))
                want = dtype if named == HALF_WIDTH and dtype in ("bf16", "fp16") else \
                    named if named else dtype
                assert costs["precision"].iat[i] == want or (pd.isna(want) and pd.isna(
                    costs["precision"].iat[i]))
                family = op_family(op["op"]) if op is not None else op_family("")
                if family in MATMUL_FAMILIES and not (op is not None and op[S.FLOPS] > 0):
                    assert np.isnan(costs["read_bytes"].iat[i])
                    unknown += 1
                elif op is not None and np.isfinite(op[S.OP_READ_BYTES]):
                    assert np.isfinite(costs["read_bytes"].iat[i])
                    seen += 1
            assert seen > 10
