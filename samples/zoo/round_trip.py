"""Zoo: host round trips. Blocking reads drain the GPU queue; host work then leaves it idle.

Label cpu_launch: per instant, the GPU idles while the host *works* (NumPy and Python on the
values it read back), not while it is blocked in the syncs themselves (those last a few us
each). The cause is the round trip GPU result -> host decision -> next launch, 50 times per
step; the fix is to keep the decision on the GPU (--no-sync), not CUDA graphs.

Each step runs --syncs rounds of: a bf16 matmul (--dim, ~0.2 ms on an H200: more GPU time
than its launch costs, so without syncs the GPU would stay busy), then a blocking read of a
column of the result to host memory (``.cpu()``: aten::to -> cudaMemcpyAsync DtoH +
cudaStreamSynchronize, which waits until the GPU queue is empty), then host-side NumPy and
Python post-processing of those values (argsort, a Python filter) whose result goes back to the
GPU (``torch.tensor(..., device=)``, a pageable HtoD copy) to steer the next round. The GPU idles
from each sync until the host has decided and launched the next round. Every step ends with a
--copy-mb MiB ``.cpu()`` into pageable memory (a long blocking DtoH copy) and a NumPy summary of
it. Expected: GPU idle > 50% of the step, nearly every gap starting where a sync returns.

    python samples/zoo/round_trip.py --out RUN [--profiler torch|profkit] [--tiny --device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

FULL = dict(syncs=50, dim=4096, copy_mb=8)
TINY = dict(syncs=10, dim=32, copy_mb=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__)
    common.add_size_args(p, FULL, syncs="blocking GPU->host reads per step",
                         dim="size of the square matmul between syncs",
                         copy_mb="MiB copied to pageable host memory per step")
    p.add_argument("--no-sync", action="store_true",
                   help="the twin without the cause: the same GPU work, but the values stay on "
                   "the GPU (no .cpu(), no host round trip), so nothing blocks the host")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_round_trip")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        a = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype) / args.dim**0.5
        b = torch.randn(args.dim, args.dim, device=env.device, dtype=dtype) / args.dim**0.5
        big = torch.randn(args.copy_mb * 2**20 // 4, device=env.device)
        history: list[float] = []

        def step_on_gpu(_: int) -> None:
            y = a
            for _ in range(args.syncs):
                y = torch.mm(y, b).clamp_(-1, 1)
                scores = y[:, 0].float()
                y.masked_fill_((scores > 0.0)[:, None], 0.5)  # no .nonzero(): no sync
            history.append(big.mul(1.0001).std())  # stays on the GPU

        def step(_: int) -> None:
            y = a
            for _ in range(args.syncs):
                y = torch.mm(y, b).clamp_(-1, 1)
                scores = y[:, 0].float().cpu().numpy()  # blocks until the GPU is done
                if not np.isfinite(scores).all():  # the kind of check that motivates syncs
                    raise FloatingPointError("non-finite activations")
                order = np.argsort(scores)
                keep = [int(i) for i in order if scores[i] > 0.0][: args.dim // 4]
                history.append(len(keep))
                rows = torch.tensor(keep or [0], device=env.device)  # pageable HtoD copy
                y.index_fill_(0, rows, 0.5)
            host = big.mul(1.0001).cpu()  # long blocking DtoH into pageable memory
            history.append(float(host.numpy().std()))

        times = common.run_steps(args, env, step_on_gpu if args.no_sync else step)
        common.report(args, env, "zoo/round_trip", times,
                      label="round_trip_removed" if args.no_sync else "cpu_launch",
                      syncs_per_step=0 if args.no_sync else args.syncs,
                      copy_mb_per_step=args.copy_mb)


if __name__ == "__main__":
    main()
