"""HF ``generate`` with a randomly initialised Llama: prefill a prompt batch, decode greedily.

    python samples/infer_hf.py --profiler profkit --out RUN                  # eager, dynamic cache
    python samples/infer_hf.py --cache static --compile --profiler profkit --out RUN

Each ``generate`` call is one profiler step; no profkit or record_function range marks the
phases (profkit must find them in the trace). The labels, printed on the PROFKIT_SAMPLE line,
come from a timer independent of the profiler: a stopping criterion that synchronises the
GPU and reads the clock each time generate asks whether to stop, i.e. after each new token.
Time to first token is the first reading since generate was called (the prefill and its
token); the per-token times are the differences between successive readings (decode).
"""

from __future__ import annotations

import argparse
import statistics
import time

import common
import torch

FULL = dict(batch=8, prompt=512, new_tokens=32, layers=16, dim=2048, heads=32, kv_heads=8,
            ffn=5632, vocab=32000)
TINY = dict(batch=2, prompt=16, new_tokens=4, layers=2, dim=64, heads=4, kv_heads=2, ffn=128,
            vocab=256)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__, profiler="none", steps=6)
    p.add_argument("--cache", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--compile", action="store_true", help="torch.compile the forward")
    common.add_size_args(p, FULL)
    return common.parse_sized(p, argv, FULL, TINY, "infer_hf")


class TokenClock:
    """A stopping criterion that never stops: it records when each new token is there."""

    def __init__(self, cuda: bool) -> None:
        self.cuda, self.t0, self.marks = cuda, 0.0, []

    def start(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()
        self.t0, self.marks = time.perf_counter(), []

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        if self.cuda:
            torch.cuda.synchronize()
        self.marks.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def label(self) -> dict[str, float]:
        ttft = (self.marks[0] - self.t0) * 1e3
        per_token = [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return {"ttft_ms": ttft, "tpot_ms": statistics.median(per_token) if per_token else 0.0,
                "decode_ms": sum(per_token), "tokens": len(self.marks)}


def build(args, env):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.dim, intermediate_size=args.ffn,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads,
                      max_position_embeddings=args.prompt + args.new_tokens + 8)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if env.is_cuda else torch.float32
    model = LlamaForCausalLM(cfg).to(env.device, dtype).eval()
    if args.compile:
        # no CUDA graphs: under "reduce-overhead" the static cache's in-place update is
        # refused (its output is overwritten by the next replay; seen with transformers 5.17)
        model.forward = torch.compile(model.forward, fullgraph=True)
    return model


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from transformers import StoppingCriteriaList

    with common.session(args) as env:
        model = build(args, env)
        clock = TokenClock(env.is_cuda)
        gen = torch.Generator(device=env.device).manual_seed(4321)
        labels: list[dict[str, float]] = []

        @torch.inference_mode()
        def step(_: int) -> None:
            prompt = torch.randint(args.vocab, (args.batch, args.prompt), device=env.device,
                                   generator=gen)
            clock.start()
            model.generate(prompt, attention_mask=torch.ones_like(prompt),
                           max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                           do_sample=False, cache_implementation=args.cache,
                           stopping_criteria=StoppingCriteriaList([clock]), pad_token_id=0)
            labels.append(clock.label())

        times = common.run_steps(args, env, step)
        common.report(args, env, "infer_hf", times, batch=args.batch, prompt=args.prompt,
                      new_tokens=args.new_tokens, cache=args.cache, compiled=args.compile,
                      per_step=[{k: round(v, 3) for k, v in d.items()} for d in labels])


if __name__ == "__main__":
    main()
