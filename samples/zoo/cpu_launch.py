"""Zoo: CPU launch-bound. Thousands of tiny kernels per step from a Python loop.

Each step runs --ops in-place elementwise ops on a tensor of --numel elements (256 floats by
default): every kernel runs for ~2 us on the GPU, but each costs the host several us of
Python, dispatcher and cudaLaunchKernel, so the GPU sits idle between kernels waiting for the
next launch. The trace shows short kernels, small gaps after each one, and a host thread
that is busy all the time (never blocked in a sync).

    python samples/zoo/cpu_launch.py --out RUN [--profiler torch|profkit] [--tiny --device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402

FULL = dict(ops=2000, numel=256)
TINY = dict(ops=40, numel=16)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--ops", type=int, help="tiny kernels launched per step")
    p.add_argument("--numel", type=int, help="elements of the tensor they work on")
    p.add_argument("--sync-every", type=int, default=0, metavar="N",
                   help="torch.cuda.synchronize() after every N ops (0: never). The host is the "
                   "bottleneck, so the GPU has drained by then and removing them saves little")
    p.add_argument("--cuda-graph", action="store_true",
                   help="capture the step's ops in a CUDA graph once, replay it every step")
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_cpu_launch")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        x = torch.rand(args.numel, device=env.device)

        def ops() -> None:
            # In place: no allocations, so the trace is kernels and launches only.
            for i in range(args.ops // 2):
                x.mul_(0.999)
                x.add_(0.001)
                if args.sync_every and (2 * i + 2) % args.sync_every == 0:
                    common.sync_if_cuda(env)

        graph = _capture(ops, env) if args.cuda_graph else None

        def step(_: int) -> None:
            if graph is not None:
                graph.replay()
            else:
                ops()

        times = common.run_steps(args, env, step)
        common.report(args, env, "zoo/cpu_launch", times, label="cpu_launch",
                      kernels_per_step=2 * (args.ops // 2), sync_every=args.sync_every,
                      cuda_graph=args.cuda_graph)


def _capture(ops, env: common.Env):
    """The step's ops as a CUDA graph (warmed up on a side stream first, as the docs say)."""
    if not env.is_cuda:
        raise SystemExit("--cuda-graph needs a CUDA device")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ops()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops()
    return graph


if __name__ == "__main__":
    main()
