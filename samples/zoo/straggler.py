"""Zoo: straggler. One rank does extra work before every backward all_reduce.

DDP over a balanced bf16 MLP (--layers x --dim, --tokens rows per rank): identical work on
every rank, except that rank --slow-rank runs --extra-matmuls additional matmuls of the
layer's shape (~30% of the step on an H200 by default) between the forward and the backward,
i.e. just before DDP's gradient all_reduces. The slow rank reaches every collective late, so
the other rank's NCCL kernels start early and spin waiting: its collective time (and then its
idle time before the optimizer step) grows by about the extra work, every step, while the
slow rank's collectives are short. --sleep-ms adds a host-side delay instead or as well (it
only delays the GPU when the host is not already running ahead of it).

    torchrun --standalone --nproc_per_node 2 samples/zoo/straggler.py --out RUN
    balanced.py is the same workload with no extra work: the control.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402
from model import mlp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

FULL = dict(dim=4096, tokens=8192, layers=6, extra_matmuls=7)
TINY = dict(dim=64, tokens=64, layers=2, extra_matmuls=20)


def parse_args(argv: list[str] | None, *, straggler: bool) -> argparse.Namespace:
    name = "zoo_straggler" if straggler else "zoo_balanced"
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--dim", type=int, help="layer width")
    p.add_argument("--tokens", type=int, help="rows of the activation matrix per rank")
    p.add_argument("--layers", type=int)
    if straggler:
        p.add_argument("--slow-rank", type=int, default=1, help="the rank that straggles")
        p.add_argument("--extra-matmuls", type=int,
                       help="extra (tokens x dim x dim) matmuls on the slow rank per step")
        p.add_argument("--sleep-ms", type=float, default=0.0,
                       help="extra host sleep on the slow rank per step, before backward")
    args = p.parse_args(argv)
    if not straggler:
        args.slow_rank, args.extra_matmuls, args.sleep_ms = -1, 0, 0.0
    args = common.resolve_sizes(args, FULL, TINY)
    common.validate(args, name)
    return args


def main(argv: list[str] | None = None, *, straggler: bool = True) -> None:
    args = parse_args(argv, straggler=straggler)
    label = "straggler" if straggler else "balanced"
    with common.session(args, need_group=True) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        torch.manual_seed(0)  # same initial weights on every rank
        model = mlp(args.dim, args.layers).to(env.device, dtype)
        model = DistributedDataParallel(model,
                                        device_ids=[env.local_rank] if env.is_cuda else None)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        torch.manual_seed(100 + env.rank)
        x = torch.randn(args.tokens, args.dim, device=env.device, dtype=dtype)
        w_extra = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype)
        scratch = torch.empty_like(x)
        slow = env.rank == args.slow_rank

        def step(_: int) -> None:
            loss = model(x).float().pow(2).mean()
            if slow:
                with torch.profiler.record_function(common.MARK_PREFIX + "straggler_extra"):
                    for _ in range(args.extra_matmuls):
                        torch.mm(x, w_extra, out=scratch)
                    if args.sleep_ms:
                        time.sleep(args.sleep_ms / 1e3)
            loss.backward()  # DDP all_reduces the gradient buckets during backward
            opt.step()
            opt.zero_grad(set_to_none=True)

        times = common.run_steps(args, env, step)
        common.report(args, env, f"zoo/{label}", times, label=label,
                      slow_rank=args.slow_rank if straggler else None,
                      extra_matmuls=args.extra_matmuls, sleep_ms=args.sleep_ms)


if __name__ == "__main__":
    main()
