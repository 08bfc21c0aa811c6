"""Zoo: host work between CUDA-graph replays. The GPU work is already one graph launch.

A denoising-style inference loop: the "model" (a small bf16 MLP over --tokens x --dim, a few
short kernels) is captured once into a CUDA graph before the step loop; each step runs
--replays iterations of: replay the graph, then a Python "scheduler step" on the host
(--host-ms of pure-Python arithmetic, as a diffusers scheduler or a sampler's bookkeeping
does between model calls) whose result (a step size) feeds the next iteration's tiny eager
update of the latent. The host never blocks on the GPU, but every iteration's launch waits
for the host work, and the graph runs in a fraction of that time: the GPU idles between
replays. CUDA graphs are already in use; fusing or graphing more would not help, taking the
work off the host (or out of the loop) would. --no-hooks is the twin without the cause: the
same replays and updates with no host work between them.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode on the eager model,
times --replays), the number of replays per step and the host wall time of the Python work per
step (``host_scheduler_ms``, perf_counter).

    python samples/zoo/graph_hooks.py --out RUN [--no-hooks] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import groundtruth  # noqa: E402
import torch  # noqa: E402
from model import mlp  # noqa: E402

FULL = dict(tokens=8192, dim=2048, layers=4, replays=8, host_ms=1.5)
TINY = dict(tokens=16, dim=32, layers=2, replays=3, host_ms=0.5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL, tokens="rows of the latent",
                         layers="MLP layers inside the graph",
                         replays="graph replays (denoising iterations) per step",
                         host_ms="Python work after each replay")
    p.add_argument("--no-hooks", action="store_true",
                   help="the twin without the cause: no host work between the replays")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_graph_hooks")


def scheduler_step(t: int, budget_s: float) -> float:
    """Pure-Python bookkeeping for --host-ms: a sigma schedule, recomputed term by term."""
    deadline = time.perf_counter() + budget_s
    sigma, k = 0.0, 0
    while time.perf_counter() < deadline:
        k += 1
        sigma += math.exp(-0.01 * ((t * 31 + k) % 997)) / k
    return 1e-3 / (1.0 + sigma)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        if not env.is_cuda:
            print("graph_hooks.py: no CUDA device, the 'graph' runs eagerly (smoke test)")
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        torch.manual_seed(0)
        model = mlp(args.dim, args.layers).to(env.device, dtype).eval()
        latent = torch.randn(args.tokens, args.dim, device=env.device, dtype=dtype)
        static_out = torch.empty_like(latent)

        @torch.inference_mode()
        def denoise() -> None:
            static_out.copy_(model(latent))

        flops_per_replay = groundtruth.count_flops(denoise)
        graph = None
        if env.is_cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream before the capture
                for _ in range(3):
                    denoise()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                denoise()
            torch.cuda.synchronize()
        host = groundtruth.HostClock()
        budget_s = 0.0 if args.no_hooks else args.host_ms / 1e3

        @torch.inference_mode()
        def step(i: int) -> None:
            host.new_step()
            dt = 1e-3
            for r in range(args.replays):
                if graph is not None:
                    graph.replay()
                else:
                    denoise()
                if budget_s:
                    with host("scheduler"):
                        dt = scheduler_step(i * args.replays + r, budget_s)
                latent.add_(static_out - latent, alpha=dt)  # the scheduler's update

        times, split = groundtruth.run_measured(args, env, step)
        common.report(args, env, "zoo/graph_hooks", times,
                      label="host_work_removed" if args.no_hooks else "host_work",
                      cuda_graph=graph is not None, no_hooks=args.no_hooks,
                      replays_per_step=args.replays, host_ms_per_replay=0.0 if args.no_hooks
                      else args.host_ms, tokens=args.tokens, dim=args.dim, layers=args.layers,
                      flop_per_step=flops_per_replay * args.replays, **host.medians(), **split)


if __name__ == "__main__":
    main()
