"""Zoo: compute-bound. Large bf16 matmuls keep the GPU busy with compute kernels.

A stack of wide bias-free Linear layers (8192 x 8192, 8192 tokens, bf16 parameters) trained
with SGD: each step is ~12 matmuls of ~1.1 TFLOP each and a few elementwise kernels, launched
by a handful of Python calls, so the GPU runs back-to-back GEMMs for >85% of the step.

    python samples/zoo/compute.py --out RUN [--profiler torch|profkit] [--tiny --device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402
from model import mlp  # noqa: E402

FULL = dict(dim=8192, tokens=8192, layers=4)
TINY = dict(dim=64, tokens=64, layers=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--dim", type=int, help="layer width")
    p.add_argument("--tokens", type=int, help="rows of the activation matrix")
    p.add_argument("--layers", type=int)
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_compute")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        # bf16 parameters directly (no autocast): no cast kernels between the GEMMs.
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        torch.manual_seed(0)
        model = mlp(args.dim, args.layers).to(env.device, dtype)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        x = torch.randn(args.tokens, args.dim, device=env.device, dtype=dtype)

        def step(_: int) -> None:
            model(x).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        times = common.run_steps(args, env, step)
        flop = 3 * 2 * args.tokens * args.dim * args.dim * args.layers
        med = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
        common.report(args, env, "zoo/compute", times, label="compute",
                      matmul_tflop_per_step=round(flop / 1e12, 3),
                      achieved_tflops=round(flop / (med * 1e-3) / 1e12, 1))


if __name__ == "__main__":
    main()
