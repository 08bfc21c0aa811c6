"""Zoo: compilation inside the steps. A torch.compile'd model sees a new sequence length each step.

A small pre-LayerNorm MLP stack (--layers blocks of width --dim, bf16 autocast, AdamW) is
compiled with ``torch.compile(dynamic=False)`` and trained on batches of --batch sequences
whose length changes every step (--seq, --seq + --seq-step, ...), as a loop that pads each
batch to its own longest sequence does. Every new length fails Dynamo's shape guards, so each
step recompiles (Dynamo trace, AOTAutograd, Inductor codegen and Triton compilation: seconds
of host work) before a few ms of GPU work; the recompile limit is raised so that Dynamo does
not fall back to eager. The model is compiled and warmed up on one length before the loop.
--mark-dynamic is the twin without the cause: ``torch._dynamo.mark_dynamic`` on the sequence
dimension, so the warm-up compiles one graph with a symbolic length that every step reuses.

Ground truth in the PROFKIT_SAMPLE line: the sequence length of each step, FLOPs per step
(FlopCounterMode on the eager model, per length), Dynamo's count of frames compiled during
the loop (``compiles_in_loop``) and the host wall time of each step's call into the compiled
model (``host_compiled_call_ms``: compilation included).

    python samples/zoo/recompile.py --out RUN [--mark-dynamic] [--profiler torch|profkit]
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

FULL = dict(batch=32, seq=256, seq_step=32, dim=1024, layers=1)
TINY = dict(batch=2, seq=8, seq_step=2, dim=32, layers=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__, steps=8)
    common.add_size_args(p, FULL, batch="sequences per step", seq="sequence length of step 0",
                         seq_step="length added at every step")
    p.add_argument("--mark-dynamic", action="store_true",
                   help="the twin without the cause: mark the sequence dimension dynamic")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_recompile")


class Block(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim, bias=False)
        self.proj = torch.nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(F.gelu(self.fc(self.norm(x)), approximate="tanh"))


class Model(torch.nn.Module):
    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*(Block(dim) for _ in range(layers)))
        self.norm = torch.nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.blocks(x))
        return (y.float() ** 2).mean()  # mean over the (changing) sequence length


def _raise_recompile_limit(limit: int) -> None:
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), limit))


def _frames_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["stats"].get(k, 0) for k in ("unique_graphs",)))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    _raise_recompile_limit(4 * args.steps + 8)
    with common.session(args) as env:
        torch.manual_seed(0)
        model = Model(args.dim, args.layers).to(env.device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        compiled = torch.compile(model, dynamic=False)
        amp = torch.bfloat16 if env.is_cuda else None
        lengths = [args.seq + args.seq_step * i for i in range(args.steps)]
        warm_len = args.seq + args.seq_step * (args.steps + 3)  # a length no step uses
        host = groundtruth.HostClock()

        def batch(length: int) -> torch.Tensor:
            x = torch.randn(args.batch, length, args.dim, device=env.device)
            if args.mark_dynamic:
                torch._dynamo.mark_dynamic(x, 1)
            return x

        def train_step(fn, length: int) -> None:
            x = batch(length)
            with host("compiled_call"):
                with common.autocast(env, amp):
                    loss = fn(x)
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        flops = []
        for length in sorted({lengths[0], lengths[-1]}):
            flops.append(groundtruth.count_flops(lambda n=length: train_step(model, n)))
        for _ in range(2):  # compile (on a length no step uses) and warm up before the loop
            train_step(compiled, warm_len)
        common.sync_if_cuda(env)
        host.steps.clear()
        before = _frames_compiled()

        def step(i: int) -> None:
            host.new_step()
            train_step(compiled, lengths[i])

        times, split = groundtruth.run_measured(args, env, step)
        per_token = (flops[-1] - flops[0]) / max(lengths[-1] - lengths[0], 1)
        common.report(args, env, "zoo/recompile", times,
                      label="compile_removed" if args.mark_dynamic else "compile",
                      mark_dynamic=args.mark_dynamic, seq_lengths=lengths,
                      batch=args.batch, dim=args.dim, layers=args.layers,
                      flop_per_step_first=flops[0], flop_per_step_last=flops[-1],
                      flop_per_extra_token=round(per_token),
                      compiles_in_loop=_frames_compiled() - before,
                      host_compiled_call_ms_per_step=[round(s.get("compiled_call", 0.0), 1)
                                                      for s in host.steps],
                      **host.medians(skip=0), **split)


if __name__ == "__main__":
    main()
