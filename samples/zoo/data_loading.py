"""Zoo: data-loading-bound. A slow single-process DataLoader starves a small model.

The Dataset's ``__getitem__`` spends --ms-per-batch / --batch milliseconds of pure-Python CPU
work per sample (a stand-in for decoding and augmentation), and the DataLoader has
num_workers=0, so the main thread builds every batch itself: each step the host sits in
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` for ~40 ms while the GPU,
which needs ~1 ms for the small MLP's forward and backward, idles.

--slow-every N: only every Nth batch is slow (a new shard opened), the others take --fast-ms.

    python samples/zoo/data_loading.py --out RUN [--slow-every N] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

FULL = dict(batch=64, features=1024, hidden=4096, ms_per_batch=40.0)
TINY = dict(batch=4, features=16, hidden=32, ms_per_batch=10.0)


class SlowDataset(Dataset):
    """Synthetic samples that each cost work_s seconds of Python CPU time to 'decode'."""

    def __init__(self, length: int, features: int, work_s: float, batch: int = 1,
                 slow_every: int = 0, fast_s: float = 0.0) -> None:
        self.length, self.features, self.work_s = length, features, work_s
        self.batch, self.slow_every, self.fast_s = batch, slow_every, fast_s

    def cost_s(self, index: int) -> float:
        """work_s, or with slow_every N only every Nth batch (a new shard opened) and fast_s
        for the rest."""
        if not self.slow_every:
            return self.work_s
        return self.work_s if (index // self.batch + 1) % self.slow_every == 0 else self.fast_s

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        deadline = time.perf_counter() + self.cost_s(index)
        acc = index
        while time.perf_counter() < deadline:  # busy, like a decoder would be
            acc = (acc * 1103515245 + 12345) % 2**31
        g = torch.Generator().manual_seed(acc)
        x = torch.randn(self.features, generator=g)
        return x, x.sum().reshape(1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__)
    common.add_size_args(p, FULL, ms_per_batch="CPU ms the dataset spends per batch")
    p.add_argument("--workers", type=int, default=0, help="DataLoader num_workers")
    p.add_argument("--slow-every", type=int, default=0, metavar="N",
                   help="only every Nth batch costs --ms-per-batch (a shard boundary); the "
                   "others cost --fast-ms")
    p.add_argument("--fast-ms", type=float, default=1.0,
                   help="with --slow-every: CPU ms of the other batches")
    p.add_argument("--preload", action="store_true",
                   help="the twin without the cause: every batch is built before the loop, so "
                   "the steps do the same GPU work without waiting for the DataLoader")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_data_loading")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
            torch.nn.Linear(args.hidden, args.features), torch.nn.ReLU(),
            torch.nn.Linear(args.features, 1)).to(env.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dataset = SlowDataset(args.steps * args.batch, args.features,
                              args.ms_per_batch / 1e3 / args.batch, args.batch,
                              args.slow_every, args.fast_ms / 1e3 / args.batch)
        loader = iter(DataLoader(dataset, batch_size=args.batch, num_workers=args.workers,
                                 shuffle=False, pin_memory=False))
        if args.preload:
            loader = iter(list(loader))

        def step(_: int) -> None:
            x, y = next(loader)
            x, y = x.to(env.device, non_blocking=True), y.to(env.device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        times = common.run_steps(args, env, step)
        common.report(args, env, "zoo/data_loading", times,
                      label="data_loading_removed" if args.preload else "data_loading",
                      loader_ms_per_batch=args.ms_per_batch, num_workers=args.workers,
                      slow_every=args.slow_every, fast_ms=args.fast_ms,
                      preload=args.preload)


if __name__ == "__main__":
    main()
