"""Zoo: compute-bound on the wrong math. An fp32 MLP whose GEMMs run without tensor cores.

A stack of --layers bias-free --dim x --dim Linear layers (GELU between them) on --tokens rows,
trained with SGD, in fp32 with TF32 switched off (``torch.backends.cuda.matmul.allow_tf32 =
False``, float32 matmul precision "highest"): every GEMM runs on the FP32 FMA pipes (tens of
TFLOP/s on an H100) instead of the tensor cores, so the GPU is ~100% busy with compute kernels
and the step is math-bound at a small fraction of the chip's tensor throughput. --bf16 is the
twin without the cause: the same model and data under bf16 autocast (tensor cores; the fp32
master weights stay); --fp16 the same under fp16 autocast.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode, one unprofiled
step) and the achieved TFLOP/s; ``samples/capture_why.sh`` adds ncu's tensor-pipe activity.

    python samples/zoo/precision.py --out RUN [--bf16 | --fp16] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import groundtruth  # noqa: E402
import torch  # noqa: E402
from model import mlp  # noqa: E402

FULL = dict(dim=4096, tokens=8192, layers=3)
TINY = dict(dim=64, tokens=64, layers=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL, dim="layer width", tokens="rows of the activation matrix")
    p.add_argument("--bf16", action="store_true",
                   help="the twin without the cause: bf16 autocast (tensor cores)")
    p.add_argument("--fp16", action="store_true",
                   help="the same twin under fp16 autocast (tensor cores, 16-bit float)")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_precision")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    # The cause: full-precision fp32 GEMMs (no TF32 either: TF32 would use the tensor cores).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    with common.session(args) as env:
        torch.manual_seed(0)
        model = mlp(args.dim, args.layers).to(env.device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-6)
        x = torch.randn(args.tokens, args.dim, device=env.device)
        amp = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None

        def train_step() -> None:
            with common.autocast(env, amp):
                loss = model(x).float().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        flops = groundtruth.count_flops(train_step)
        times, split = groundtruth.run_measured(args, env, lambda _: train_step())
        common.report(args, env, "zoo/precision", times,
                      label="compute_fp32_removed" if amp else "compute_fp32",
                      dtype="bf16-autocast" if args.bf16 else "fp16-autocast" if args.fp16
                      else "fp32", allow_tf32=False,
                      dim=args.dim, tokens=args.tokens, layers=args.layers,
                      flop_per_step=flops,
                      achieved_tflops=groundtruth.achieved_tflops(flops, split), **split)


if __name__ == "__main__":
    main()
