"""Train the small GPT on synthetic random tokens: the profkit sample training workload.

    python samples/train_gpt.py --profiler torch --out out/gpt              # one process
    torchrun --standalone --nproc_per_node 2 samples/train_gpt.py \\
        --parallel ddp --profiler torch --out out/stock_ddp                 # DDP, NCCL
    torchrun ... samples/train_gpt.py --parallel fsdp --profiler profkit --out RUN

Under torchrun the process group is NCCL on CUDA, gloo on CPU. --profiler torch writes stock
``rank{R}.<ns>.pt.trace.json.gz`` files; --profiler profkit writes a profkit run directory.
"""

from __future__ import annotations

import argparse

import common
import torch
import torch.nn.functional as F
from model import GPT, Block, GPTConfig
from torch.nn.parallel import DistributedDataParallel

# Sizes: FULL takes ~18 ms per step on an H200 (~24 ms under the profiler: DDP on 2 GPUs,
# mostly GPU-bound) and writes ~0.35 MB of gzipped trace per rank for 3 steps.
FULL = dict(batch=32, seq=512, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, seq=32, layers=2, dim=64, heads=4, vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_common_args(p, profiler="none", steps=8)
    p.add_argument("--parallel", choices=("ddp", "fsdp", "none"), default=None,
                   help="default: ddp under torchrun with >1 process, else none")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                   help="default: bf16 on CUDA, fp32 on CPU (CPU bf16 is very slow)")
    p.add_argument("--batch", type=int, help="sequences per rank and step")
    p.add_argument("--seq", type=int, help="tokens per sequence")
    p.add_argument("--layers", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--lr", type=float, default=3e-4)
    args = common.resolve_sizes(p.parse_args(argv), FULL, TINY)
    common.validate(args, "train_gpt")
    return args


def _fsdp(model: GPT, dtype: torch.dtype) -> torch.nn.Module:
    """Shard each block, then the root (FSDP2 where torch has it, else FSDP1)."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        fully_shard = None
    if fully_shard is not None:
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for block in model.blocks:
            fully_shard(block, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    return FullyShardedDataParallel(
        model, auto_wrap_policy=ModuleWrapPolicy({Block}), use_orig_params=True,
        mixed_precision=MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32),
        device_id=torch.cuda.current_device() if torch.cuda.is_available() else None)


def build(args: argparse.Namespace, env: common.Env):
    """Model (wrapped for --parallel), optimizer and whether to autocast."""
    cfg = GPTConfig(vocab_size=args.vocab, max_seq=args.seq, n_layer=args.layers,
                    dim=args.dim, n_head=args.heads)
    torch.manual_seed(0)
    model = GPT(cfg).to(env.device)
    dtype = common.parse_dtype(args.dtype)
    use_autocast = True
    if args.parallel == "ddp":
        model = DistributedDataParallel(
            model, device_ids=[env.local_rank] if env.is_cuda else None)
    elif args.parallel == "fsdp":
        model = _fsdp(model, dtype)
        use_autocast = False  # FSDP's mixed-precision policy casts the parameters
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    return model, opt, (dtype if use_autocast else None)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import os

    if args.parallel is None:
        args.parallel = "ddp" if int(os.environ.get("WORLD_SIZE", 1)) > 1 else "none"
    with common.session(args, need_group=args.parallel != "none") as env:
        args.dtype = args.dtype or ("bf16" if env.is_cuda else "fp32")
        model, opt, amp_dtype = build(args, env)
        gen = torch.Generator(device=env.device).manual_seed(1234 + env.rank)
        last = {}
        peaks: dict[str, list[int]] = {"allocated": [], "reserved": []}

        def step(_: int) -> None:
            if env.is_cuda:  # the step's own peak: the label profkit's memory table must match
                torch.cuda.reset_peak_memory_stats()
            tokens = torch.randint(args.vocab, (args.batch, args.seq + 1),
                                   device=env.device, generator=gen)
            x, y = tokens[:, :-1], tokens[:, 1:]
            with common.autocast(env, amp_dtype):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            last["loss"] = loss.detach()
            if env.is_cuda:
                peaks["allocated"].append(torch.cuda.max_memory_allocated())
                peaks["reserved"].append(torch.cuda.max_memory_reserved())

        times = common.run_steps(args, env, step)
        n_params = sum(p.numel() for p in model.parameters())
        common.report(args, env, "train_gpt", times, parallel=args.parallel,
                      dtype=args.dtype, batch=args.batch, seq=args.seq, layers=args.layers,
                      dim=args.dim, local_params=n_params,
                      final_loss=round(float(last["loss"]), 4),
                      peak_allocated_bytes=peaks["allocated"],
                      peak_reserved_bytes=peaks["reserved"])


if __name__ == "__main__":
    main()
