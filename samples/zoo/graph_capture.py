"""Zoo: CUDA-graph capture inside the profiled window, then replays.

The step is --ops tiny in-place elementwise ops (as cpu_launch.py). At the first recorded step
the script captures them into a CUDA graph (``torch.cuda.graph``: the launches are recorded,
no kernel runs); every later step replays the graph (one ``cudaGraphLaunch``, --ops kernels
back to back). With --capture-only every recorded step captures a new graph and nothing is
replayed, like a trace of an inference server's start-up (graph capture of every batch size).
A profiler that reads the capture step as execution sees thousands of launches and an idle
GPU and calls it launch-bound; it is neither: nothing ran.

    python samples/zoo/graph_capture.py --out RUN [--capture-only] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402

FULL = dict(ops=2000, numel=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=8)
    p.add_argument("--ops", type=int, help="tiny kernels per step")
    p.add_argument("--numel", type=int, help="elements of the tensor they work on")
    p.add_argument("--capture-only", action="store_true",
                   help="capture a graph in every recorded step, replay none")
    args = common.resolve_sizes(p.parse_args(argv), FULL, FULL)
    common.validate(args, "zoo_graph_capture")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        if not env.is_cuda:
            raise SystemExit("graph_capture.py needs a CUDA device")
        x = torch.rand(args.numel, device=env.device)

        def work() -> None:
            for _ in range(args.ops // 2):
                x.mul_(0.999)
                x.add_(0.001)

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream before capture (as the docs say)
            work()
        torch.cuda.current_stream().wait_stream(side)
        first_recorded = common.PROFILE_WAIT + common.PROFILE_WARMUP
        graphs: list[torch.cuda.CUDAGraph] = []

        def step(i: int) -> None:
            if i < first_recorded:
                work()
            elif args.capture_only or not graphs:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    work()
                graphs.append(g)
            else:
                graphs[-1].replay()

        times = common.run_steps(args, env, step)
        common.report(args, env, "zoo/graph_capture", times, label="graph_capture",
                      capture_only=args.capture_only, kernels_per_graph=2 * (args.ops // 2))


if __name__ == "__main__":
    main()
