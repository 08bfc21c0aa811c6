"""KV-cache generation with the sample GPT: prefill a prompt batch, then decode token by token.

    python samples/infer_kv.py --profiler torch --out out/infer_kv
    python samples/infer_kv.py --profiler profkit --out RUN

    python samples/infer_kv.py --graph-decode --profiler profkit --out RUN   # CUDA graph

Each generate call (one prefill and --new-tokens decode steps, greedy) is one profiler step.
The phases are ranges named ``profkit/prefill`` and ``profkit/decode``: profkit's mark() under
--profiler profkit, torch.profiler.record_function otherwise.

``--graph-decode`` replays each decode step from one CUDA graph captured before the profiled
steps: static shapes (the whole cache with a mask of the positions written so far, the
position a device tensor), so each token costs three launches (set the position, replay,
feed the token back) instead of one per op. ``--labels`` synchronises the GPU and reads the
clock after the prefill's token and after each decode token (the PROFKIT_SAMPLE line's
``per_step``: ttft_ms, tpot_ms, decode_ms), a timer independent of the profiler.
"""

from __future__ import annotations

import argparse
import statistics
import time

import common
import torch
import torch.nn.functional as F
from model import GPT, GPTConfig, KVCache

FULL = dict(batch=16, prompt=256, new_tokens=16, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, prompt=16, new_tokens=4, layers=2, dim=64, heads=4, vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__, profiler="none", steps=6)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None,
                   help="default: bf16 on CUDA, fp32 on CPU")
    p.add_argument("--graph-decode", action="store_true",
                   help="replay each decode step from a CUDA graph (CUDA only)")
    p.add_argument("--labels", action="store_true",
                   help="sync and time each token (per_step labels on the summary line)")
    common.add_size_args(p, FULL, batch="prompts per generate call",
                         prompt="prompt length in tokens",
                         new_tokens="tokens decoded after the prefill")
    return common.parse_sized(p, argv, FULL, TINY, "infer_kv")


class TokenTimer:
    """With --labels: the clock after a sync at the start, after the first token and after
    each decode token; otherwise nothing (no sync)."""

    def __init__(self, on: bool) -> None:
        self.on, self.marks = on, []

    def mark(self) -> None:
        if self.on:
            torch.cuda.synchronize()
            self.marks.append(time.perf_counter())

    def label(self) -> dict[str, float]:
        t = [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return {"ttft_ms": t[0], "tpot_ms": statistics.median(t[1:]), "decode_ms": sum(t[1:]),
                "tokens": len(t)} if len(t) > 1 else {}


class GraphDecoder:
    """One decode step for the whole batch with static shapes, captured in a CUDA graph."""

    def __init__(self, model: GPT, cache: KVCache, batch: int, device: torch.device) -> None:
        self.model, self.cache = model, cache
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(model.cfg.max_seq, device=device)
        self.next = self.token.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph), torch.inference_mode():
            self._step()

    def _step(self) -> None:
        m, cache = self.model, self.cache
        x = m.tok_emb(self.token) + m.pos_emb(self.pos)
        mask = (self.slots <= self.pos).view(1, 1, 1, -1)
        for block in m.blocks:
            attn, (b, t, c) = block.attn, x.shape
            q, k, v = attn.qkv(block.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, attn.n_head, c // attn.n_head).transpose(1, 2)
                       for z in (q, k, v))
            cache.k[attn.layer].index_copy_(2, self.pos, k)
            cache.v[attn.layer].index_copy_(2, self.pos, v)
            y = F.scaled_dot_product_attention(q, cache.k[attn.layer], cache.v[attn.layer],
                                               attn_mask=mask)
            x = x + attn.proj(y.transpose(1, 2).reshape(b, t, c))
            x = x + block.mlp(block.ln2(x))
        self.next.copy_(m.head(m.ln_f(x))[:, -1].argmax(dim=-1, keepdim=True))

    def __call__(self, token: torch.Tensor, pos: int) -> torch.Tensor:
        self.token.copy_(token)
        self.pos.fill_(pos)
        self.graph.replay()
        return self.next.clone()


@torch.inference_mode()
def generate(args: argparse.Namespace, model: GPT, cache: KVCache, prompt: torch.Tensor,
             timer: TokenTimer, graph: GraphDecoder | None = None) -> torch.Tensor:
    """Greedy generation; returns (batch, new_tokens) ids, left on the device."""
    out = []
    timer.mark()
    with common.mark(args, "prefill"):
        logits = model(prompt, cache, pos=0)
        token = logits[:, -1].argmax(dim=-1, keepdim=True)
    timer.mark()
    with common.mark(args, "decode"):
        pos = prompt.shape[1]
        for _ in range(args.new_tokens):
            out.append(token)
            if graph is not None:
                token = graph(token, pos)
            else:
                logits = model(token, cache, pos=pos)
                token = logits[:, -1].argmax(dim=-1, keepdim=True)
            pos += 1
            timer.mark()
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
        graph = GraphDecoder(model, cache, args.batch, env.device) if args.graph_decode else None
        last, labels = {}, []

        def step(_: int) -> None:
            prompt = torch.randint(args.vocab, (args.batch, args.prompt), device=env.device,
                                   generator=gen)
            timer = TokenTimer(args.labels and env.is_cuda)
            last["tokens"] = generate(args, model, cache, prompt, timer, graph)
            labels.append({k: round(v, 3) for k, v in timer.label().items()})

        times = common.run_steps(args, env, step)
        tokens = last["tokens"].cpu()
        decoded = args.batch * args.new_tokens
        common.report(args, env, "infer_kv", times, dtype=args.dtype, batch=args.batch,
                      prompt=args.prompt, new_tokens=args.new_tokens,
                      decoded_tokens_per_step=decoded, sample_ids=tokens[0, :8].tolist(),
                      graph_decode=args.graph_decode, layers=args.layers, dim=args.dim,
                      **({"per_step": labels} if args.labels else {}))


if __name__ == "__main__":
    main()
