"""Zoo: communication-bound. Big, exposed all_reduces after a little compute.

Every step runs a few small bf16 matmuls, then --collectives blocking all_reduces of --mb MiB
each (fp32; 2 x 512 MiB by default). Each all_reduce is issued synchronously on the default
stream's order (no async_op, no bucketing, nothing to overlap with), and the next step's
matmul waits for it, so NCCL kernels fill most of the GPU timeline and none of it overlaps
compute. Meant for 2 ranks: torchrun --standalone --nproc_per_node 2 samples/zoo/communication.py

    ... --out RUN [--profiler torch|profkit] [--tiny --device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

FULL = dict(mb=512, collectives=2, dim=2048, matmuls=4)
TINY = dict(mb=1, collectives=2, dim=32, matmuls=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--mb", type=int, help="MiB per all_reduce (fp32 buffer)")
    p.add_argument("--collectives", type=int, help="all_reduces per step")
    p.add_argument("--dim", type=int, help="size of the small square matmuls")
    p.add_argument("--matmuls", type=int, help="small matmuls per step")
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_communication")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args, need_group=True) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        a = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype)
        b = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype)
        numel = args.mb * 2**20 // 4
        bufs = [torch.ones(numel, device=env.device) for _ in range(args.collectives)]

        def step(_: int) -> None:
            y = a
            for _ in range(args.matmuls):
                y = torch.mm(y, b)
            for buf in bufs:
                # The all_reduce reads what the compute wrote and the next step's compute
                # waits for it: nothing can overlap.
                buf[:1].copy_(y[0, :1].float())
                dist.all_reduce(buf)

        times = common.run_steps(args, env, step)
        common.report(args, env, "zoo/communication", times, label="communication",
                      allreduce_bytes_per_step=args.collectives * numel * 4)


if __name__ == "__main__":
    main()
