"""Zoo: memory-bound. A chain of elementwise and normalisation ops on a large fp32 tensor.

Each step runs, forward only and without autograd, a chain of 16 ops (scale, bias, GELU,
residual add, LayerNorm, gain, tanh, softmax, SiLU, clamp, rsqrt, ...) on a --rows x --cols fp32
tensor (16384 x 4096 = 64M elements, 256 MiB): every op is its own kernel that reads and
writes the whole tensor from and to HBM and does a few FLOPs per element, so the step is
bound by DRAM bandwidth, with no matmul at all. --compile runs the same chain under
torch.compile (compiled, and warmed up, before the step loop): Inductor fuses it into a few
kernels that read the input once and write the output once, the twin without the cause.

Ground truth in the PROFKIT_SAMPLE line: the bytes the eager ops read and write
(``eager_tensor_bytes``, counted per aten op), the minimum traffic of the fused chain
(``fused_min_bytes``: read x, write y) and the achieved GB/s of each.

    python samples/zoo/eltwise_chain.py --out RUN [--compile] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import groundtruth  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

FULL = dict(rows=16384, cols=4096)
TINY = dict(rows=64, cols=128)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__, steps=12)
    common.add_size_args(p, FULL, cols="last dimension (the LayerNorm / softmax one)")
    p.add_argument("--compile", action="store_true",
                   help="the twin without the cause: the same chain under torch.compile")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_eltwise_chain")


def chain(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """16 elementwise / normalisation ops, each one a separate kernel in eager mode."""
    y = x * 1.5
    y = y + b
    y = F.gelu(y)
    y = y + x
    y = F.layer_norm(y, (y.shape[-1],), w, b)
    y = y * w
    y = torch.tanh(y)
    y = torch.softmax(y, dim=-1)
    y = y * y.shape[-1]
    y = F.silu(y)
    y = y + x
    y = y.clamp(-4.0, 4.0)
    y = y * y
    y = y + 1.0
    y = torch.rsqrt(y)
    return y - x


OPS_PER_CHAIN = 16


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        torch.manual_seed(0)
        x = torch.randn(args.rows, args.cols, device=env.device)
        w = torch.rand(args.cols, device=env.device) + 0.5
        b = torch.randn(args.cols, device=env.device) * 0.1
        fn = torch.compile(chain, fullgraph=True) if args.compile else chain
        with torch.no_grad():
            flops = groundtruth.count_flops(lambda: chain(x, w, b))
            eager_bytes = groundtruth.count_tensor_bytes(lambda: chain(x, w, b))
            for _ in range(3):  # compile (with --compile) and warm up outside the step loop
                fn(x, w, b)
        common.sync_if_cuda(env)
        out: dict[str, torch.Tensor] = {}

        @torch.no_grad()
        def step(_: int) -> None:
            out["y"] = fn(x, w, b)

        times, split = groundtruth.run_measured(args, env, step)
        fused_min = 2 * x.numel() * x.element_size()
        clean = split["unprofiled_median_ms"] or float("nan")
        common.report(args, env, "zoo/eltwise_chain", times,
                      label="memory_bound_removed" if args.compile else "memory_bound",
                      compile=args.compile, rows=args.rows, cols=args.cols,
                      tensor_mib=round(x.numel() * 4 / 2**20, 1), ops_per_chain=OPS_PER_CHAIN,
                      flop_per_step=flops, eager_tensor_bytes=eager_bytes,
                      fused_min_bytes=fused_min,
                      achieved_gbps_if_eager_bytes=round(eager_bytes / clean / 1e6, 1),
                      achieved_gbps_if_fused_min=round(fused_min / clean / 1e6, 1),
                      checksum=round(float(out["y"].double().mean()), 6), **split)


if __name__ == "__main__":
    main()
