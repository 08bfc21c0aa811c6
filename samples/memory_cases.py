"""Single-GPU workloads that provoke one memory or precision behaviour each, with labels.

    python samples/memory_cases.py --case varlen --out RUN         # variable sequence lengths
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python ... --case varlen   # its fix
    python ... --case varlen --sdpa flash --out RUN   # FlashAttention: no plan per new length
    python ... --case varlen --bucket 512 --out RUN   # lengths padded to 4 buckets, warmed
    python samples/memory_cases.py --case empty_cache [--no-empty-cache] --out RUN
    python samples/memory_cases.py --case grow_oom --out RUN       # out of memory at step 4
    python samples/memory_cases.py --case ckpt [--no-ckpt] --out RUN  # activation checkpointing
    python samples/memory_cases.py --case fp8 [--gemm bf16] --out RUN  # fp8 GEMMs (_scaled_mm)

Every case prints its labels on the PROFKIT_SAMPLE line, measured by torch outside profkit:
per-step ``max_memory_allocated`` and ``max_memory_reserved`` (reset every step), the
out-of-memory step and message, FLOPs from ``FlopCounterMode`` (model and executed, with the
recompute), fp8/bf16 GEMM throughput. The recomputation of a checkpointed block runs inside a
``record_function("label/recompute")`` range: the independent label of recompute time.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import common
import torch
import torch.nn.functional as F
from model import GPT, GPTConfig
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

FULL = dict(batch=32, seq=512, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, seq=32, layers=2, dim=64, heads=4, vocab=256)
CASES = ("varlen", "empty_cache", "grow_oom", "ckpt", "fp8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__, steps=8)
    p.add_argument("--case", choices=CASES, required=True)
    p.add_argument("--no-empty-cache", action="store_true", help="empty_cache: the fix twin")
    p.add_argument("--no-ckpt", action="store_true", help="ckpt: checkpointing off")
    p.add_argument("--gemm", choices=("fp8", "bf16"), default="fp8", help="fp8: the GEMMs")
    p.add_argument("--sdpa", choices=("auto", "flash", "efficient", "cudnn", "math"),
                   default="auto", help="the attention backend (auto: PyTorch's choice)")
    p.add_argument("--bucket", type=int, default=0,
                   help="varlen: pad each length up to a multiple of this, every such "
                        "length run once before the steps (as after a long run's first steps)")
    p.add_argument("--oom-base", type=int, default=128,
                   help="grow_oom: batch of step 0, doubled every step")
    common.add_size_args(p, FULL)
    return common.parse_sized(p, argv, FULL, TINY, "memory_cases")


def _gpt(args: argparse.Namespace, env: common.Env, seq: int | None = None) -> GPT:
    cfg = GPTConfig(vocab_size=args.vocab, max_seq=seq or args.seq, n_layer=args.layers,
                    dim=args.dim, n_head=args.heads)
    torch.manual_seed(0)
    return GPT(cfg).to(env.device)


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class CheckpointedGPT(torch.nn.Module):
    """The GPT with every block under non-reentrant torch.utils.checkpoint (or not); the
    block's second run, inside the backward pass, is wrapped in label/recompute."""

    def __init__(self, gpt: GPT, on: bool) -> None:
        super().__init__()
        self.gpt, self.on = gpt, on

    @staticmethod
    def _block(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        if _in_backward():
            with record_function("label/recompute"):
                return block(x)
        return block(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        g = self.gpt
        x = g.tok_emb(idx) + g.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in g.blocks:
            x = (checkpoint(self._block, block, x, use_reentrant=False) if self.on
                 else block(x))
        return g.head(g.ln_f(x))


def _attention(args):
    """The SDPA backend --sdpa names (a no-op context for auto)."""
    if args.sdpa == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION,
                        "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[args.sdpa])


def _train_step(args, env, model, opt, tokens):
    x, y = tokens[:, :-1], tokens[:, 1:]
    with common.autocast(env, torch.bfloat16 if env.is_cuda else None), _attention(args):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, args.vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def _flops(args, env, model, opt) -> int:
    """FLOPs of one training step by FlopCounterMode (recompute included when it runs)."""
    from torch.utils.flop_counter import FlopCounterMode

    tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device=env.device)
    counter = FlopCounterMode(display=False)
    with counter:
        _train_step(args, env, model, opt, tokens)
    return int(counter.get_total_flops())


class Fp8Mlp:
    """``layers`` dim x dim GEMMs on ``batch*seq`` tokens, forward only: fp8 (e4m3, per-tensor
    scales from each activation's amax, _scaled_mm) or bf16 (plain matmul)."""

    def __init__(self, args, env) -> None:
        g = torch.Generator(device=env.device).manual_seed(0)
        n = args.dim
        self.fp8 = args.gemm == "fp8"
        self.w = [torch.randn(n, n, device=env.device, generator=g, dtype=torch.bfloat16) * 0.02
                  for _ in range(args.layers)]
        if self.fp8:
            fmax = torch.finfo(torch.float8_e4m3fn).max
            self.w_scale = [(w.abs().max().float() / fmax) for w in self.w]
            self.w = [(w / s).to(torch.float8_e4m3fn) for w, s in zip(self.w, self.w_scale)]
        self.x = torch.randn(args.batch * args.seq, n, device=env.device, generator=g,
                             dtype=torch.bfloat16)
        self.flops_per_step = 2 * args.batch * args.seq * n * n * args.layers

    def step(self) -> torch.Tensor:
        x = self.x
        fmax = torch.finfo(torch.float8_e4m3fn).max
        for i, w in enumerate(self.w):
            if self.fp8:
                scale = x.abs().max().float() / fmax  # amax -> per-tensor scale
                xq = (x / scale).to(torch.float8_e4m3fn)  # the unfused cast
                y = torch._scaled_mm(xq, w.t(), scale_a=scale, scale_b=self.w_scale[i],
                                     out_dtype=torch.bfloat16)
            else:
                y = x @ w.t()
            x = F.gelu(y, approximate="tanh")
        return x


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    extra: dict[str, object] = {"case": args.case,
                                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    with common.session(args) as env:
        peaks: dict[str, list[int]] = {"allocated": [], "reserved": [], "batch": [], "seq": []}
        rng = torch.Generator().manual_seed(7)
        state: dict[str, object] = {}
        if args.case == "fp8":
            mlp = Fp8Mlp(args, env)
            extra.update(gemm=args.gemm, flops_per_step=mlp.flops_per_step)
        else:
            seq_cap = 2048 if args.case == "varlen" and not args.tiny else args.seq
            gpt = _gpt(args, env, seq_cap)
            model = CheckpointedGPT(gpt, args.case == "ckpt" and not args.no_ckpt)
            opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
            if args.case == "ckpt":
                extra["executed_flops_per_step"] = _flops(args, env, model, opt)
                model.on = False
                extra["model_flops_per_step"] = _flops(args, env, model, opt)
                model.on = not args.no_ckpt
                extra["checkpointing"] = model.on
            if args.case == "varlen" and args.bucket:  # every padded length seen once
                for seq in range(args.bucket, seq_cap + args.bucket, args.bucket):
                    tokens = torch.randint(args.vocab, (args.batch, seq + 1), device=env.device)
                    _train_step(args, env, model, opt, tokens)
                extra["bucket"] = args.bucket
            extra["sdpa"] = args.sdpa

        def step(i: int) -> None:
            if env.is_cuda:
                torch.cuda.reset_peak_memory_stats()
            if args.case == "fp8":
                state["out"] = mlp.step()
            else:
                batch, seq = args.batch, args.seq
                if args.case == "varlen":  # a new length every step, as packed-free NLP does
                    low = min(64, seq_cap // 2)
                    seq = int(torch.randint(low, seq_cap + 1, (1,), generator=rng))
                    if args.bucket:
                        seq = -(-seq // args.bucket) * args.bucket
                elif args.case == "grow_oom":
                    batch = args.oom_base * 2 ** i
                peaks["batch"].append(batch)
                peaks["seq"].append(seq)
                tokens = torch.randint(args.vocab, (batch, seq + 1), device=env.device)
                state["loss"] = _train_step(args, env, model, opt, tokens).detach()
                if args.case == "empty_cache" and not args.no_empty_cache:
                    torch.cuda.empty_cache()
            if env.is_cuda:
                peaks["allocated"].append(torch.cuda.max_memory_allocated())
                peaks["reserved"].append(torch.cuda.max_memory_reserved())

        try:
            times = common.run_steps(args, env, step)
        except torch.OutOfMemoryError as exc:  # grow_oom: the label is where and what
            if args.case != "grow_oom":
                raise
            times = []
            extra.update(oom_step=len(peaks["allocated"]), oom_batch=peaks["batch"][-1],
                         oom_message=str(exc).splitlines()[0][:300])
        if env.is_cuda:
            extra["capacity_bytes"] = torch.cuda.get_device_properties(env.device).total_memory
        common.report(args, env, "memory_cases", times, peak_allocated_bytes=peaks["allocated"],
                      peak_reserved_bytes=peaks["reserved"], batch_per_step=peaks["batch"],
                      seq_per_step=peaks["seq"], **extra)


if __name__ == "__main__":
    main()
