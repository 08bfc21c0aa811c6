"""Zoo (before/after pairs): the sample GPT trained on one GPU at a chosen size and batch shape.

The training loop of ``samples/train_gpt.py`` (``samples/model.py``'s GPT, random tokens,
bf16 autocast, AdamW), single process, with every size an option, so that two runs of it are
a "did it help" pair for ``profkit diff`` whose answer is known from the step times alone:
--batch 8 vs --batch 32 (the same model, 4x the tokens per step: longer steps, more tokens
per second) and --layers 4 vs --layers 6 with different batch shapes (a different model).

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode, one unprofiled
step), tokens per step and the achieved TFLOP/s and tokens/s of the unprofiled steps.

    python samples/zoo/gpt_sizes.py --out RUN [--batch 32] [--layers 6 --seq 256]
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
from model import GPT, GPTConfig  # noqa: E402

FULL = dict(batch=8, seq=512, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, seq=32, layers=2, dim=64, heads=4, vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL, batch="sequences per step", seq="tokens per sequence")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_gpt_sizes")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        cfg = GPTConfig(vocab_size=args.vocab, max_seq=args.seq, n_layer=args.layers,
                        dim=args.dim, n_head=args.heads)
        torch.manual_seed(0)
        model = GPT(cfg).to(env.device)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        amp = torch.bfloat16 if env.is_cuda else None
        gen = torch.Generator(device=env.device).manual_seed(1234)
        last = {}

        def train_step() -> None:
            tokens = torch.randint(args.vocab, (args.batch, args.seq + 1), device=env.device,
                                   generator=gen)
            with common.autocast(env, amp):
                logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, args.vocab),
                                   tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            last["loss"] = loss.detach()

        flops = groundtruth.count_flops(train_step)
        times, split = groundtruth.run_measured(args, env, lambda _: train_step())
        clean = split["unprofiled_median_ms"] or float("nan")
        n_tokens = args.batch * args.seq
        common.report(args, env, "zoo/gpt_sizes", times, label="size", batch=args.batch,
                      seq=args.seq, layers=args.layers, dim=args.dim, heads=args.heads,
                      vocab=args.vocab, params=sum(p.numel() for p in model.parameters()),
                      tokens_per_step=n_tokens, flop_per_step=flops,
                      achieved_tflops=groundtruth.achieved_tflops(flops, split),
                      tokens_per_s=round(n_tokens / (clean * 1e-3)),
                      final_loss=round(float(last["loss"]), 4), **split)


if __name__ == "__main__":
    main()
