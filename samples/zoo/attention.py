"""Zoo (before/after pair): attention through the math backend, then through FlashAttention.

--layers attention blocks (QKV projection, causal ``F.scaled_dot_product_attention``, output
projection, residual) on --batch x --seq tokens of width --dim in bf16, forward + backward +
SGD. By default the attention runs under ``sdpa_kernel(SDPBackend.MATH)``: it materialises the
--batch x --heads x --seq x --seq score matrix (1 GiB of bf16 per layer at the defaults),
softmax and dropout-free masking as separate kernels, then a second batched matmul. --flash
is the "after": the same call under ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``, one fused
kernel each way that never writes the scores out. A pair for ``profkit diff``. --manual writes
the attention by hand (``matmul``, ``masked_fill``, ``softmax``, ``matmul``), as models did
before SDPA.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode; it counts the full,
unmasked score matrix for both backends) and the achieved TFLOP/s.

    python samples/zoo/attention.py --out RUN [--flash | --manual] [--profiler torch|profkit]
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
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

FULL = dict(batch=8, seq=2048, dim=1024, heads=16, layers=2)
TINY = dict(batch=2, seq=16, dim=32, heads=4, layers=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL)
    p.add_argument("--flash", action="store_true",
                   help="the after: FlashAttention backend instead of the math one")
    p.add_argument("--manual", action="store_true",
                   help="attention written by hand: q @ k^T, causal mask, softmax, @ v")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_attention")


def manual_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention as models wrote it before SDPA: the scores materialised, masked,
    softmaxed, then multiplied by v (four kernels and a seq x seq matrix each way)."""
    t = q.shape[-2]
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class Attention(torch.nn.Module):
    def __init__(self, dim: int, heads: int, manual: bool = False) -> None:
        super().__init__()
        self.heads, self.manual = heads, manual
        self.qkv = torch.nn.Linear(dim, 3 * dim, bias=False)
        self.proj = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))
        y = (manual_attention(q, k, v) if self.manual
             else F.scaled_dot_product_attention(q, k, v, is_causal=True))
        return x + self.proj(y.transpose(1, 2).reshape(b, t, c))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(Attention(args.dim, args.heads, args.manual)
                                      for _ in range(args.layers))).to(env.device, dtype)
        opt = torch.optim.SGD(model.parameters(), lr=1e-5)
        x = torch.randn(args.batch, args.seq, args.dim, device=env.device, dtype=dtype)
        backend = SDPBackend.FLASH_ATTENTION if args.flash and env.is_cuda else SDPBackend.MATH

        def train_step() -> None:
            with sdpa_kernel(backend):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        flops = groundtruth.count_flops(train_step)
        times, split = groundtruth.run_measured(args, env, lambda _: train_step())
        common.report(args, env, "zoo/attention", times,
                      label="attention_flash" if args.flash else
                      "attention_manual" if args.manual else "attention_math",
                      backend="manual" if args.manual else backend.name, batch=args.batch, seq=args.seq, dim=args.dim,
                      heads=args.heads, layers=args.layers, flop_per_step=flops,
                      achieved_tflops=groundtruth.achieved_tflops(flops, split), **split)


if __name__ == "__main__":
    main()
