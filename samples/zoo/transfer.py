"""Zoo: transfer-bound. Every step uploads a large host tensor, then does a little compute.

Each step copies --mb MiB from host memory to the GPU with ``dev.copy_(host,
non_blocking=True)``, then runs --matmuls small bf16 matmuls (--dim square) on the GPU, and
ends with ``torch.cuda.synchronize()`` the way many training loops time their steps. With
pinned host memory (the default) the copy call returns at once and the GPU's copy engine is
busy for most of the step: the job is bound by the host-to-device transfer, and the final
synchronize only waits for work that was already queued (transfer time, not a host-side
stall). With --pageable the host memory is ordinary pageable memory: the driver stages it
through a pinned buffer, so the copy call itself blocks the host until the data is moved.

    python samples/zoo/transfer.py --out RUN [--pageable] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402

FULL = dict(mb=1024, dim=2048, matmuls=4)
TINY = dict(mb=4, dim=32, matmuls=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--mb", type=int, help="MiB copied host -> device per step")
    p.add_argument("--dim", type=int, help="size of the square matmuls after the copy")
    p.add_argument("--matmuls", type=int, help="matmuls per step")
    p.add_argument("--pageable", action="store_true",
                   help="copy from pageable (not pinned) host memory")
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_transfer_pageable" if args.pageable else "zoo_transfer")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        numel = args.mb * 2**20 // 4
        host = torch.randn(numel)
        if env.is_cuda and not args.pageable:
            host = host.pin_memory()
        dev = torch.empty(numel, device=env.device)
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        a = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype)

        def step(_: int) -> None:
            dev.copy_(host, non_blocking=True)
            y = a
            for _ in range(args.matmuls):
                y = torch.mm(y, a)
            common.sync_if_cuda(env)  # the loop's own step timing, as user code often does

        times = common.run_steps(args, env, step)
        common.report(args, env, "zoo/transfer", times,
                      label="transfer", pageable=args.pageable, mb_per_step=args.mb,
                      host_to_device_gb_per_step=round(args.mb * 2**20 / 1e9, 3))


if __name__ == "__main__":
    main()
