"""Zoo: host-work-bound. The optimizer step runs on the CPU (ZeRO-offload style).

A bf16-autocast MLP (--layers x --dim^2 fp32 parameters, ~25M at the defaults) does its forward
and backward on the GPU (a few ms); then every gradient is copied into a pinned host buffer
(non_blocking, then one wait for the copies), ``torch.optim.Adam`` updates fp32 master copies
of the parameters on CPU tensors, and the new parameters go back to the GPU (pinned,
non_blocking). The CPU Adam over all the parameters takes tens of ms of host compute, while
the GPU has nothing queued: the step is bound by host work, not by kernel launches (a few
hundred launches per step) nor by the copies (~100 MB each way over PCIe, a few ms).
--gpu-optimizer is the twin without the cause: the same model with a fused Adam on the GPU.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode) and, per step, the
host wall time (perf_counter) of each phase: ``host_d2h_wait_ms`` (waiting for the gradient
copies, i.e. for backward and the copies to finish), ``host_cpu_adam_ms`` (the CPU optimizer)
and ``host_h2d_issue_ms`` (issuing the copies back).

    python samples/zoo/cpu_optimizer.py --out RUN [--gpu-optimizer] [--profiler torch|profkit]
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

FULL = dict(dim=2048, tokens=16384, layers=6)
TINY = dict(dim=64, tokens=64, layers=2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL, dim="layer width", tokens="rows of the activation matrix")
    p.add_argument("--gpu-optimizer", action="store_true",
                   help="the twin without the cause: fused Adam on the GPU")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_cpu_optimizer")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        torch.manual_seed(0)
        model = mlp(args.dim, args.layers).to(env.device)
        params = list(model.parameters())
        x = torch.randn(args.tokens, args.dim, device=env.device)
        amp = torch.bfloat16 if env.is_cuda else None
        host = groundtruth.HostClock()
        pin = env.is_cuda
        if args.gpu_optimizer:
            opt = torch.optim.Adam(params, lr=1e-5, fused=env.is_cuda)
        else:
            # fp32 master parameters and gradient buffers on the host, pinned for async copies.
            master = [p.detach().cpu().clone().pin_memory() if pin else p.detach().cpu().clone()
                      for p in params]
            grads = [torch.empty_like(m, pin_memory=pin) for m in master]
            for m, g in zip(master, grads):
                m.grad = g
            opt = torch.optim.Adam(master, lr=1e-5)
            copied = torch.cuda.Event() if env.is_cuda else None

        def forward_backward() -> None:
            with common.autocast(env, amp):
                loss = model(x).float().mean()
            loss.backward()

        def train_step() -> None:
            host.new_step()
            forward_backward()
            if args.gpu_optimizer:
                opt.step()
                opt.zero_grad(set_to_none=True)
                return
            with host("d2h_wait"):
                for p, g in zip(params, grads):
                    g.copy_(p.grad, non_blocking=True)
                    p.grad = None
                if copied is not None:
                    copied.record()
                    copied.synchronize()  # the host needs the gradients before it can update
            with host("cpu_adam"):
                opt.step()
            with host("h2d_issue"):
                with torch.no_grad():
                    for p, m in zip(params, master):
                        p.copy_(m, non_blocking=True)

        flops = groundtruth.count_flops(forward_backward)
        model.zero_grad(set_to_none=True)
        times, split = groundtruth.run_measured(args, env, lambda _: train_step())
        n_params = sum(p.numel() for p in params)
        common.report(args, env, "zoo/cpu_optimizer", times,
                      label="host_work_removed" if args.gpu_optimizer else "host_work",
                      optimizer="adam-fused-gpu" if args.gpu_optimizer else "adam-cpu-offload",
                      params=n_params, copy_mb_each_way=0 if args.gpu_optimizer
                      else round(n_params * 4 / 2**20, 1),
                      torch_threads=torch.get_num_threads(), dim=args.dim, tokens=args.tokens,
                      layers=args.layers, flop_per_step=flops, **host.medians(), **split)


if __name__ == "__main__":
    main()
