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
