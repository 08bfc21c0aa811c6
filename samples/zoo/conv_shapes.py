"""Zoo: setup for new input shapes. A CNN with cudnn.benchmark on sees a new image size each step.

A plain CNN (--layers 3x3 convolutions of --channels channels with BatchNorm and ReLU, a
pooled linear head; bf16 autocast, SGD) is trained with ``torch.backends.cudnn.benchmark =
True`` on batches of --batch images whose side is drawn anew every step (--side-min to
--side-max, multiples of 8), as a loop over images of varied sizes without resizing does.
With benchmark on, cuDNN times every convolution algorithm for each new input shape before
it runs one: host work while the GPU waits. Twins: --no-benchmark (cuDNN's heuristics pick
an algorithm at once) and --bucket N (each side padded up to a multiple of N, every such
side run once before the steps, as after a long run's first steps).

Ground truth in the PROFKIT_SAMPLE line: the step times (CUDA events, split into profiled
and unprofiled steps), each step's side, whether benchmark was on, and FLOPs of a step at
the first step's side (FlopCounterMode).

    python samples/zoo/conv_shapes.py --out RUN [--no-benchmark | --bucket 64]
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

FULL = dict(batch=32, channels=128, layers=6, side_min=96, side_max=320)
TINY = dict(batch=2, channels=8, layers=2, side_min=16, side_max=32)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__, steps=10)
    common.add_size_args(p, FULL, side_min="smallest image side", side_max="largest")
    p.add_argument("--no-benchmark", action="store_true", help="twin: cudnn.benchmark off")
    p.add_argument("--bucket", type=int, default=0,
                   help="twin: pad each side up to a multiple of this, each such side run once "
                        "before the steps")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_conv_shapes")


class Net(torch.nn.Module):
    def __init__(self, channels: int, layers: int) -> None:
        super().__init__()
        convs = [torch.nn.Conv2d(3, channels, 3, padding=1, bias=False)]
        convs += [torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
                  for _ in range(layers - 1)]
        self.convs = torch.nn.ModuleList(convs)
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm2d(channels) for _ in convs)
        self.head = torch.nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, norm in zip(self.convs, self.norms):
            x = F.relu(norm(conv(x)))
        return self.head(x.mean(dim=(2, 3)))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.backends.cudnn.benchmark = not args.no_benchmark
    with common.session(args) as env:
        torch.manual_seed(0)
        model = Net(args.channels, args.layers).to(env.device).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        amp = torch.bfloat16 if env.is_cuda else None
        rng = torch.Generator().manual_seed(3)
        sides = [8 * int(torch.randint(args.side_min // 8, args.side_max // 8 + 1, (1,),
                                       generator=rng)) for _ in range(args.steps)]
        if args.bucket:
            sides = [-(-s // args.bucket) * args.bucket for s in sides]

        def train_step(side: int) -> None:
            x = torch.randn(args.batch, 3, side, side, device=env.device).to(
                memory_format=torch.channels_last)
            y = torch.randint(10, (args.batch,), device=env.device)
            with common.autocast(env, amp):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        flops = groundtruth.count_flops(lambda: train_step(sides[0]))
        for side in sorted(set(sides)) if args.bucket else ():  # every bucket seen once
            train_step(side)
        common.sync_if_cuda(env)
        times, split = groundtruth.run_measured(args, env, lambda i: train_step(sides[i]))
        common.report(args, env, "zoo/conv_shapes", times,
                      label="shape_setup_removed" if args.no_benchmark or args.bucket
                      else "shape_setup", sides=sides, benchmark=not args.no_benchmark,
                      bucket=args.bucket, batch=args.batch, channels=args.channels,
                      layers=args.layers, flop_per_step=flops, **split)


if __name__ == "__main__":
    main()
