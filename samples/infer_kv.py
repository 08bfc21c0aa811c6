"""KV-cache generation with the sample GPT: prefill a prompt batch, then decode token by token.

    python samples/infer_kv.py --profiler torch --out out/infer_kv
    python samples/infer_kv.py --profiler profkit --out RUN

Each generate call (one prefill and --new-tokens decode steps, greedy) is one profiler step.
The phases are ranges named ``profkit/prefill`` and ``profkit/decode``: profkit's mark() under
--profiler profkit, torch.profiler.record_function otherwise.
"""

from __future__ import annotations

import argparse

import common
import torch
from model import GPT, GPTConfig, KVCache

FULL = dict(batch=16, prompt=256, new_tokens=16, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, prompt=16, new_tokens=4, layers=2, dim=64, heads=4, vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__, profiler="none", steps=6)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                   help="default: bf16 on CUDA, fp32 on CPU")
    common.add_size_args(p, FULL, batch="prompts per generate call",
                         prompt="prompt length in tokens",
                         new_tokens="tokens decoded after the prefill")
    return common.parse_sized(p, argv, FULL, TINY, "infer_kv")


@torch.inference_mode()
def generate(args: argparse.Namespace, model: GPT, cache: KVCache, prompt: torch.Tensor
             ) -> torch.Tensor:
    """Greedy generation; returns (batch, new_tokens) ids, left on the device."""
    out = []
    with common.mark(args, "prefill"):
        logits = model(prompt, cache, pos=0)
        token = logits[:, -1].argmax(dim=-1, keepdim=True)
    with common.mark(args, "decode"):
        pos = prompt.shape[1]
        for _ in range(args.new_tokens):
            out.append(token)
            logits = model(token, cache, pos=pos)
            token = logits[:, -1].argmax(dim=-1, keepdim=True)
            pos += 1
    return torch.cat(out, dim=1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        args.dtype = args.dtype or ("bf16" if env.is_cuda else "fp32")
        dtype = common.parse_dtype(args.dtype)
        cfg = GPTConfig(vocab_size=args.vocab, max_seq=args.prompt + args.new_tokens,
                        n_layer=args.layers, dim=args.dim, n_head=args.heads)
        torch.manual_seed(0)
        model = GPT(cfg).to(env.device, dtype).eval()
        cache = KVCache(cfg, args.batch, cfg.max_seq, device=env.device, dtype=dtype)
        gen = torch.Generator(device=env.device).manual_seed(4321 + env.rank)
        last = {}

        def step(_: int) -> None:
            prompt = torch.randint(args.vocab, (args.batch, args.prompt), device=env.device,
                                   generator=gen)
            last["tokens"] = generate(args, model, cache, prompt)

        times = common.run_steps(args, env, step)
        tokens = last["tokens"].cpu()
        decoded = args.batch * args.new_tokens
        common.report(args, env, "infer_kv", times, dtype=args.dtype, batch=args.batch,
                      prompt=args.prompt, new_tokens=args.new_tokens,
                      decoded_tokens_per_step=decoded, sample_ids=tokens[0, :8].tolist())


if __name__ == "__main__":
    main()
