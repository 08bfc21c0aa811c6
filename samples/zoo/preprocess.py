"""Zoo: host work in the training loop. Image preprocessing on the CPU, in the main process.

Every step takes a batch of --batch raw uint8 images (3 x --raw x --raw, from a pool made at
start-up, standing in for decoded JPEGs) and preprocesses it with pure torch CPU ops in the
training loop itself: convert to float, antialiased bilinear resize, random crop, random
horizontal flip, per-image brightness / contrast jitter, normalise. That is ~20-40 ms of host
compute per step, while the small bf16 CNN it feeds needs ~10 ms of GPU; the copy to the GPU
is from pageable memory, so nothing is queued while the host preprocesses. --workers N is the
twin without the cause: the same preprocessing in N DataLoader worker processes (one batch
per item, pinned memory), so the main loop only waits for ready batches.

Not ``data_loading.py``: there the slow work sits in a ``DataLoader(num_workers=0)``'s
Dataset; here it is ordinary tensor ops (aten::upsample_bilinear2d, aten::flip, ...) on CPU
tensors in the loop.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode) and the host wall
time of the preprocessing per step (``host_preprocess_ms``; with --workers, the wait for the
next batch, ``host_next_batch_ms``).

    python samples/zoo/preprocess.py --out RUN [--workers 8] [--profiler torch|profkit]
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
from torch.utils.data import DataLoader, Dataset  # noqa: E402

FULL = dict(batch=64, raw=256, resize=176, crop=160, width=256, pool=4)
TINY = dict(batch=4, raw=48, resize=40, crop=32, width=16, pool=2)
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="profkit", steps=10)
    groundtruth.add_truth_args(p)
    p.add_argument("--batch", type=int, help="images per step")
    p.add_argument("--raw", type=int, help="side of the raw images")
    p.add_argument("--resize", type=int, help="side after the resize")
    p.add_argument("--crop", type=int, help="side of the random crop fed to the model")
    p.add_argument("--width", type=int, help="channels of the CNN's widest stage")
    p.add_argument("--pool", type=int, help="raw batches made at start-up and cycled")
    p.add_argument("--workers", type=int, default=0,
                   help="0: preprocess in the loop (the cause); N > 0: the twin, N DataLoader "
                   "workers do it")
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "zoo_preprocess")
    return args


def preprocess(raw: torch.Tensor, args: argparse.Namespace, seed: int) -> torch.Tensor:
    """uint8 (B, 3, raw, raw) -> normalised float (B, 3, crop, crop), pure torch on the CPU."""
    g = torch.Generator().manual_seed(seed)
    x = raw.float().div_(255.0)
    x = F.interpolate(x, size=(args.resize, args.resize), mode="bilinear",
                      align_corners=False, antialias=True)
    i, j = torch.randint(0, args.resize - args.crop + 1, (2,), generator=g).tolist()
    x = x[:, :, i:i + args.crop, j:j + args.crop]
    flip = (torch.rand(x.shape[0], generator=g) < 0.5).view(-1, 1, 1, 1)
    x = torch.where(flip, x.flip(-1), x)
    brightness = 1.0 + 0.4 * (torch.rand(x.shape[0], 1, 1, 1, generator=g) - 0.5)
    contrast = 1.0 + 0.4 * (torch.rand(x.shape[0], 1, 1, 1, generator=g) - 0.5)
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x * brightness - mean) * contrast + mean).clamp_(0.0, 1.0)
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    return x.contiguous()


class Batches(Dataset):
    """Item i is the preprocessed batch i (the DataLoader twin: batch_size=None)."""

    def __init__(self, pool: list[torch.Tensor], args: argparse.Namespace, length: int) -> None:
        self.pool, self.args, self.length = pool, args, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        x = preprocess(self.pool[i % len(self.pool)], self.args, seed=i)
        return x, torch.tensor(i % 10)


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    w = args.width

    def conv(cin: int, cout: int, stride: int = 1) -> list[torch.nn.Module]:
        return [torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), torch.nn.ReLU()]

    return torch.nn.Sequential(
        *conv(3, w // 4, 2), *conv(w // 4, w // 2), *conv(w // 2, w, 2), *conv(w, w),
        *conv(w, w), *conv(w, 2 * w, 2), *conv(2 * w, 2 * w), *conv(2 * w, 2 * w),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(2 * w, 10))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        torch.manual_seed(0)
        model = make_model(args).to(env.device, memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
        g = torch.Generator().manual_seed(0)
        pool = [torch.randint(0, 256, (args.batch, 3, args.raw, args.raw), dtype=torch.uint8,
                              generator=g) for _ in range(args.pool)]
        amp = torch.bfloat16 if env.is_cuda else None
        host = groundtruth.HostClock()
        loader = None
        if args.workers:
            loader = iter(DataLoader(Batches(pool, args, args.steps + 2), batch_size=None,
                                     num_workers=args.workers, pin_memory=env.is_cuda,
                                     prefetch_factor=2, persistent_workers=False))

        def next_batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
            if loader is not None:
                with host("next_batch"):
                    x, y = next(loader)
            else:
                with host("preprocess"):
                    x = preprocess(pool[i % len(pool)], args, seed=i)
                y = torch.tensor(i % 10)
            x = x.to(env.device, non_blocking=True, memory_format=torch.channels_last)
            return x, y.expand(x.shape[0]).to(env.device, non_blocking=True)

        def forward_backward(x: torch.Tensor, y: torch.Tensor) -> None:
            with common.autocast(env, amp):
                loss = F.cross_entropy(model(x).float(), y)
            loss.backward()

        def step(i: int) -> None:
            host.new_step()
            forward_backward(*next_batch(i))
            opt.step()
            opt.zero_grad(set_to_none=True)

        x0 = preprocess(pool[0], args, seed=0).to(env.device, memory_format=torch.channels_last)
        flops = groundtruth.count_flops(
            lambda: forward_backward(x0, torch.zeros(args.batch, dtype=torch.long,
                                                     device=env.device)))
        model.zero_grad(set_to_none=True)
        times, split = groundtruth.run_measured(args, env, step)
        common.report(args, env, "zoo/preprocess", times,
                      label="host_work_removed" if args.workers else "host_work",
                      workers=args.workers, batch=args.batch, raw=args.raw, crop=args.crop,
                      torch_threads=torch.get_num_threads(), flop_per_step=flops,
                      **host.medians(), **split)


if __name__ == "__main__":
    main()
