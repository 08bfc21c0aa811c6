"""No "use torch.compile" for kernels Inductor already generated (issue 40, item 7).

- samples/runs/why/recompile_fixed (1 x H100, README there): a model under torch.compile
  (mark_dynamic), launch-bound as profiled; its fusible kernels are Inductor's.
- tests/data/public/tracelens_compile_triton (TraceLens, MIT): a compiled block on an MI300X,
  compute-bound; its elementwise and reduction kernels are Inductor's.
- samples/runs/zoo/cpu_launch: an eager loop of tiny kernels, which keeps the advice.
"""

from __future__ import annotations

import pytest

from tests.analysed import analysed
from tests.conftest import REPO
from tests.realruns import read_doc

RUNS = REPO / "samples" / "runs"
PUBLIC = REPO / "tests" / "data" / "public"
COMPILE_FUSION = ("fuse small ops with torch.compile", "fused kernels (torch.compile)",
                  "fuse the small ops with torch.compile", "fuse them (torch.compile)")


def kernel_names(path) -> list[str]:
    traces = list(path.rglob("*.json.gz"))
    return [e["name"] for t in traces for e in read_doc(t)["traceEvents"]
            if e.get("cat") == "kernel"]


@pytest.mark.parametrize("path, category", [(RUNS / "why" / "recompile_fixed", "cpu_launch"),
                                            (PUBLIC / "tracelens_compile_triton", "compute")])
def test_a_compiled_step_is_not_told_to_compile(path, category):
    names = kernel_names(path)
    assert any(n.startswith(("triton_poi_fused", "triton_red_fused", "triton_per_fused"))
               for n in names)  # Inductor's, in the raw trace
    a = analysed(path)
    (f,) = [f for f in a.findings if f.category == category]
    assert not any(p in f.recommendation for p in COMPILE_FUSION), f.recommendation
    assert "already torch.compile's" in f.recommendation
    assert all(not any(p in g.recommendation for p in COMPILE_FUSION) for g in a.findings)


def test_an_eager_launch_bound_loop_keeps_the_compile_advice():
    names = kernel_names(RUNS / "zoo" / "cpu_launch")
    assert names and not any(n.startswith("triton_") for n in names)
    (f,) = [f for f in analysed(RUNS / "zoo" / "cpu_launch").findings
            if f.category == "cpu_launch"]
    assert "fuse small ops with torch.compile" in f.recommendation
