"""Zoo (before/after pair): greedy generation without a KV cache, then with one.

The sample GPT (``samples/model.py``, bf16, eval) generates --new-tokens tokens for --batch
prompts of --prompt tokens per step. By default there is no cache: every new token re-runs
the whole model over the prompt and every token generated so far (prefill-sized forwards,
O(n^2) work). --kv-cache is the "after": one prefill fills ``model.KVCache`` and each new
token is a one-token forward that attends to the cached keys and values (as
``samples/infer_kv.py`` does). Both produce the same tokens. A pair for ``profkit diff``.

Ground truth in the PROFKIT_SAMPLE line: FLOPs per step (FlopCounterMode, one unprofiled
step) and the generated ids of the first prompt (equal in both runs).

    python samples/zoo/kv_cache.py --out RUN [--kv-cache] [--profiler torch|profkit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402
import groundtruth  # noqa: E402
import torch  # noqa: E402
from model import GPT, GPTConfig, KVCache  # noqa: E402

FULL = dict(batch=16, prompt=256, new_tokens=12, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, prompt=16, new_tokens=4, layers=2, dim=64, heads=4, vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = groundtruth.truth_parser(__doc__)
    common.add_size_args(p, FULL, batch="prompts per generate call",
                         prompt="prompt length in tokens", new_tokens="tokens generated per call")
    p.add_argument("--kv-cache", action="store_true",
                   help="the after: prefill once, then one-token forwards over a KV cache")
    return common.parse_sized(p, argv, FULL, TINY, "zoo_kv_cache")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args) as env:
        dtype = torch.bfloat16 if env.is_cuda else torch.float32
        cfg = GPTConfig(vocab_size=args.vocab, max_seq=args.prompt + args.new_tokens,
                        n_layer=args.layers, dim=args.dim, n_head=args.heads)
        torch.manual_seed(0)
        model = GPT(cfg).to(env.device, dtype).eval()
        cache = KVCache(cfg, args.batch, cfg.max_seq, device=env.device, dtype=dtype)
        gen = torch.Generator(device=env.device).manual_seed(4321)
        last = {}

        @torch.inference_mode()
        def generate(prompt: torch.Tensor) -> torch.Tensor:
            out = []
            if args.kv_cache:
                with common.mark(args, "prefill"):
                    token = model(prompt, cache, pos=0)[:, -1].argmax(-1, keepdim=True)
                with common.mark(args, "decode"):
                    pos = prompt.shape[1]
                    for _ in range(args.new_tokens):
                        out.append(token)
                        token = model(token, cache, pos=pos)[:, -1].argmax(-1, keepdim=True)
                        pos += 1
            else:
                with common.mark(args, "decode_recompute"):
                    seq = prompt
                    for _ in range(args.new_tokens):
                        token = model(seq)[:, -1].argmax(-1, keepdim=True)
                        out.append(token)
                        seq = torch.cat([seq, token], dim=1)
            return torch.cat(out, dim=1)

        def step(_: int) -> None:
            prompt = torch.randint(args.vocab, (args.batch, args.prompt), device=env.device,
                                   generator=gen)
            last["tokens"] = generate(prompt)

        flops = groundtruth.count_flops(lambda: step(0))
        times, split = groundtruth.run_measured(args, env, step)
        common.report(args, env, "zoo/kv_cache", times,
                      label="kv_cache" if args.kv_cache else "no_kv_cache",
                      kv_cache=args.kv_cache, batch=args.batch, prompt=args.prompt,
                      new_tokens=args.new_tokens, layers=args.layers, dim=args.dim,
                      flop_per_step=flops, sample_ids=last["tokens"][0, :8].tolist(), **split)


if __name__ == "__main__":
    main()
