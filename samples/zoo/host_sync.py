"""Zoo: host-synchronisation-bound. Every step reads a large result back into pageable memory.

Each step runs --matmuls bf16 matmuls (--dim square, ~1.4 ms each on an H200 at 8192), then
copies the last result, as fp32 (--dim^2 x 4 bytes: 256 MiB at 8192), to host memory with
``.cpu()`` into ordinary pageable memory, as a loop that collects predictions for metrics
does, and reads the loss with ``.item()``. A pageable device-to-host copy blocks its calling
thread until the data has been staged through a pinned buffer, far below the link's rate, and
nothing else is queued meanwhile: the step is bound by that blocking copy. --pinned is the
twin without the cause: the same bytes go into a pinned buffer with non_blocking=True, read a
step later, so the copy runs at the link's rate while the next step computes.

    python samples/zoo/host_sync.py --out RUN [--pinned] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402

FULL = dict(dim=8192, matmuls=2)
TINY = dict(dim=64, matmuls=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--dim", type=int, help="size of the square matmuls (and of the copied result)")
    p.add_argument("--matmuls", type=int, help="matmuls per step")
    p.add_argument("--pinned", action="store_true",
                   help="the twin without the cause: copy into pinned memory, non_blocking, "
                   "read one step later")
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_host_sync_pinned" if args.pinned else "zoo_host_sync")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        a = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype) / args.dim**0.5
        pinned = torch.empty(args.dim, args.dim, pin_memory=env.is_cuda)
        metrics: list[float] = []

        def step(i: int) -> None:
            y = a
            for _ in range(args.matmuls):
                y = torch.mm(y, a)
            if args.pinned:
                if i:  # last step's copy has long finished: reading it costs nothing
                    metrics.append(float(pinned[0, 0]))
                pinned.copy_(y, non_blocking=True)
            else:
                host = y.float().cpu()  # pageable: blocks until the bytes are on the host
                metrics.append(float(host[0, 0]))
                metrics.append(y.float().abs().mean().item())  # a sync on the loss-like scalar

        times = common.run_steps(args, env, step)
        nbytes = args.dim * args.dim * 4
        common.report(args, env, "zoo/host_sync", times,
                      label="host_sync_removed" if args.pinned else "host_sync",
                      copy_mb_per_step=round(nbytes / 2**20, 1), pinned=args.pinned)


if __name__ == "__main__":
    main()
