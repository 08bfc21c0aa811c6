"""Multi-GPU workloads, one parallelism each, with labels (run under torchrun).

    torchrun --nproc_per_node 2 samples/parallel_cases.py --case pipeline --microbatches 4
    torchrun ... --case experts --skew 3          # expert parallel, one expert gets 3x tokens
    torchrun ... --case fsdp --unit linear        # FSDP2, every Linear its own unit (or block)
    torchrun ... --case tp                        # tensor-parallel MLP (DTensor)
    torchrun --nproc_per_node 4 ... --case mesh --host-bound-rank 3   # DeviceMesh dp x tp
    torchrun ... --case zero3 --prefetch-bucket 0 # DeepSpeed ZeRO-3 (bf16, torch AdamW)

The PROFKIT_SAMPLE line carries the labels: the layout as built (groups and their ranks), the
pipeline's stages, microbatches and the bubble's theory (p-1)/(m+p-1), the tokens each expert
receives, the FSDP units, ZeRO-3's effective knobs and its parameters' sizes. Every case keeps the global batch fixed across its twins.
"""

from __future__ import annotations

import argparse
import functools

import common
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from model import GPT, GPTConfig
from parallel_tp import mesh, tp

FULL = dict(batch=32, seq=512, layers=8, dim=1024, heads=16, vocab=8192, tokens=16384)
TINY = dict(batch=8, seq=16, layers=4, dim=64, heads=4, vocab=256, tokens=64)
CASES = ("pipeline", "experts", "fsdp", "tp", "mesh", "zero3")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = common.sample_parser(__doc__, steps=8)
    p.add_argument("--case", choices=CASES, required=True)
    p.add_argument("--microbatches", type=int, default=4, help="pipeline: per step")
    p.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved"), default="gpipe",
                   help="pipeline: interleaved is interleaved 1F1B, --stages-per-rank per rank")
    p.add_argument("--stages-per-rank", type=int, default=2,
                   help="pipeline, interleaved: stages per rank (looped: rank r holds r, r+p, ...)")
    p.add_argument("--skew", type=float, default=1.0,
                   help="experts: expert 0 receives this many times the tokens of each other")
    p.add_argument("--unit", choices=("linear", "block"), default="block", help="fsdp")
    p.add_argument("--fsdp-version", type=int, choices=(1, 2), default=2,
                   help="fsdp: 2 (fully_shard) or 1 (FullyShardedDataParallel)")
    p.add_argument("--tp-mode", choices=("allreduce", "sp", "async"), default="allreduce",
                   help="tp: all-reduce TP, sequence parallel compiled, or async TP")
    p.add_argument("--tp-microbatches", type=int, default=1,
                   help="tp: gradient-accumulation microbatches per step (same --batch)")
    p.add_argument("--host-bound-rank", type=int, default=-1,
                   help="mesh: this rank sleeps 30 ms of host time in every step")
    p.add_argument("--prefetch-bucket", type=float, default=None,
                   help="zero3: stage3_prefetch_bucket_size (elements; DeepSpeed's default 5e7)")
    p.add_argument("--persistence", type=float, default=None,
                   help="zero3: stage3_param_persistence_threshold (elements; default 1e5)")
    p.add_argument("--max-live", type=float, default=None,
                   help="zero3: stage3_max_live_parameters (elements; default 1e9)")
    p.add_argument("--reduce-bucket", type=float, default=None,
                   help="zero3: reduce_bucket_size (elements; default 5e8)")
    common.add_size_args(p, FULL)
    return common.parse_sized(p, argv, FULL, TINY, "parallel_cases")


def _cfg(args) -> GPTConfig:
    return GPTConfig(vocab_size=args.vocab, max_seq=args.seq, n_layer=args.layers,
                     dim=args.dim, n_head=args.heads)


def _tokens(args, env, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device=env.device).manual_seed(1234)
    t = torch.randint(args.vocab, (batch, args.seq + 1), device=env.device, generator=g)
    return t[:, :-1].contiguous(), t[:, 1:].contiguous()


# ----------------------------------------------------------------------------------- pipeline
class Stage(nn.Module):
    """A contiguous slice of the GPT's blocks; the first stage embeds, the last projects."""

    def __init__(self, gpt: GPT, lo: int, hi: int, first: bool, last: bool) -> None:
        super().__init__()
        self.emb = (gpt.tok_emb, gpt.pos_emb) if first else None
        if first:
            self.tok_emb, self.pos_emb = gpt.tok_emb, gpt.pos_emb
        self.blocks = nn.ModuleList(gpt.blocks[lo:hi])
        self.last = last
        if last:
            self.ln_f = gpt.ln_f
            self.head = nn.Linear(gpt.cfg.dim, gpt.cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.emb is not None:
            x = self.tok_emb(x) + self.pos_emb(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x)) if self.last else x


def pipeline(args, env) -> tuple[callable, dict]:
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    p, m = env.world_size, args.microbatches
    v = args.stages_per_rank if args.schedule == "interleaved" else 1
    torch.manual_seed(0)
    gpt = GPT(_cfg(args))
    per = args.layers // (p * v)
    dtype = torch.bfloat16 if env.is_cuda else torch.float32
    # stage i of p*v holds blocks [i*per, (i+1)*per); rank r holds stages r, r+p, ...
    mods = [Stage(gpt, i * per, (i + 1) * per, i == 0, i == p * v - 1).to(env.device, dtype)
            for i in range(env.rank, p * v, p)]
    stages = [PipelineStage(mod, i, p * v, env.device)
              for mod, i in zip(mods, range(env.rank, p * v, p))]

    def loss_fn(logits, target):
        return F.cross_entropy(logits.float().reshape(-1, args.vocab), target.reshape(-1))

    if args.schedule == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=m, loss_fn=loss_fn)
    else:
        kind = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
        schedule = kind(stages[0], n_microbatches=m, loss_fn=loss_fn)
    params = [q for mod in mods for q in mod.parameters()]
    opt = torch.optim.AdamW(params, lr=3e-4)
    x, y = _tokens(args, env, args.batch)
    has_first, has_last = env.rank == 0, env.rank == (p * v - 1) % p

    def step(_: int) -> None:
        kwargs = {"target": y, "losses": []} if has_last else {}
        if has_first:
            schedule.step(x, **kwargs)
        else:
            schedule.step(**kwargs)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, dict(stages=p, virtual_stages=v, microbatches=m, schedule=args.schedule,
                      global_batch=args.batch, microbatch_size=args.batch // m,
                      bubble_theory=round((p - 1) / (v * m + p - 1), 4),
                      layout=f"pipeline of {p} stages")


# ------------------------------------------------------------------------------------ experts
def _splits(world: int, tokens: int, skew: float) -> list[int]:
    """Tokens this rank sends to each expert: expert 0 gets `skew` shares, the others one."""
    shares = [skew] + [1.0] * (world - 1)
    sizes = [int(tokens * s / sum(shares)) for s in shares]
    sizes[-1] += tokens - sum(sizes)
    return sizes


def experts(args, env) -> tuple[callable, dict]:
    from torch.distributed.nn.functional import all_to_all_single

    torch.manual_seed(env.rank)
    dtype = torch.bfloat16 if env.is_cuda else torch.float32
    expert = nn.Sequential(nn.Linear(args.dim, 4 * args.dim, bias=False), nn.GELU("tanh"),
                           nn.Linear(4 * args.dim, args.dim, bias=False)).to(env.device, dtype)
    opt = torch.optim.AdamW(expert.parameters(), lr=3e-4)
    send = _splits(env.world_size, args.tokens, args.skew)
    x = torch.randn(args.tokens, args.dim, device=env.device, dtype=dtype, requires_grad=True)
    received: list[int] = []

    def step(_: int) -> None:
        counts = torch.tensor(send, device=env.device)
        recv_counts = torch.empty_like(counts)
        dist.all_to_all_single(recv_counts, counts)  # the routing: who receives how many
        recv = recv_counts.tolist()
        received[:] = recv
        with common.mark(args, "dispatch"):
            routed = all_to_all_single(torch.empty(sum(recv), args.dim, device=env.device,
                                                   dtype=dtype), x, recv, send)
        with common.mark(args, "expert"):
            out = expert(routed)
        with common.mark(args, "combine"):
            back = all_to_all_single(torch.empty_like(x), out, send, recv)
        back.float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step_fn = step
    labels = dict(skew=args.skew, tokens_sent_per_expert=send, layout=f"expert parallel "
                  f"{env.world_size} (one expert per rank, all_to_all_single dispatch)")
    return step_fn, labels | {"_received": received}


# --------------------------------------------------------------------------------------- fsdp
def fsdp(args, env) -> tuple[callable, dict]:
    if args.fsdp_version == 1:
        return fsdp1(args, env)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = GPT(_cfg(args)).to(env.device)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if env.is_cuda else torch.float32,
                              reduce_dtype=torch.float32)
    units = 0
    for block in model.blocks:
        if args.unit == "linear":
            for mod in block.modules():
                if isinstance(mod, nn.Linear):
                    fully_shard(mod, mp_policy=mp)
                    units += 1
        else:
            fully_shard(block, mp_policy=mp)
            units += 1
    fully_shard(model, mp_policy=mp)
    units += 1
    return _fsdp_step(args, env, model), dict(unit=args.unit, fsdp_units=units,
                                              layout=f"fsdp {env.world_size}")


def fsdp1(args, env) -> tuple[callable, dict]:
    """FSDP1 (FullyShardedDataParallel): an auto-wrap policy of nn.Linear (every Linear its
    own unit) or of the model's Block class, the root wrapping the rest."""
    from model import Block
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, lambda_auto_wrap_policy

    torch.manual_seed(0)
    model = GPT(_cfg(args)).to(env.device)
    dtype = torch.bfloat16 if env.is_cuda else torch.float32
    blocks_linears = {id(m) for b in model.blocks for m in b.modules() if isinstance(m, nn.Linear)}
    # the Linears inside the blocks, as for FSDP2 (the head's weight is the embedding's)
    policy = functools.partial(lambda_auto_wrap_policy,
                               lambda_fn=lambda m: id(m) in blocks_linears) \
        if args.unit == "linear" else ModuleWrapPolicy({Block})
    model = FullyShardedDataParallel(
        model, auto_wrap_policy=policy, use_orig_params=True,
        mixed_precision=MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32),
        device_id=env.device if env.is_cuda else None)
    units = sum(isinstance(m, FullyShardedDataParallel) for m in model.modules())
    return _fsdp_step(args, env, model), dict(unit=args.unit, fsdp_units=units, fsdp_version=1,
                                              layout=f"fsdp {env.world_size}")


def _fsdp_step(args, env, model) -> callable:
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = _tokens(args, env, args.batch)

    def step(_: int) -> None:
        loss = F.cross_entropy(model(x).float().view(-1, args.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


# -------------------------------------------------------------------------- DeepSpeed ZeRO-3
ZERO3_KNOBS = {"prefetch_bucket": "stage3_prefetch_bucket_size",
               "persistence": "stage3_param_persistence_threshold",
               "max_live": "stage3_max_live_parameters", "reduce_bucket": "reduce_bucket_size"}


def zero3(args, env) -> tuple[callable, dict]:
    """The sample GPT under DeepSpeed ZeRO stage 3 (parameters, gradients and optimizer state
    sharded over the ranks), bf16, a torch AdamW (no DeepSpeed op to compile); the knobs
    given on the command line override DeepSpeed's defaults."""
    import os

    os.environ.setdefault("DS_BUILD_OPS", "0")
    if not env.is_cuda:  # gloo on the CPU: DeepSpeed's CPU accelerator
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    torch.manual_seed(0)
    model = GPT(_cfg(args))
    sizes = [p.numel() for p in model.parameters()]
    zero = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True}
    zero |= {key: int(getattr(args, a)) for a, key in ZERO3_KNOBS.items()
             if getattr(args, a) is not None}
    cfg = {"train_micro_batch_size_per_gpu": args.batch, "gradient_accumulation_steps": 1,
           "zero_optimization": zero, "bf16": {"enabled": env.is_cuda},
           "zero_allow_untested_optimizer": True, "steps_per_print": 10**9,
           "wall_clock_breakdown": False}
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=cfg,
                                      dist_init_required=False)
    zc = engine._config.zero_config
    effective = {"stage": int(zc.stage), "overlap_comm": zc.overlap_comm,
                 "stage3_prefetch_bucket_size": zc.prefetch_bucket_size,
                 "stage3_param_persistence_threshold": zc.param_persistence_threshold,
                 "stage3_max_live_parameters": zc.max_live_parameters,
                 "reduce_bucket_size": zc.reduce_bucket_size}
    x, y = _tokens(args, env, args.batch)

    def step(_: int) -> None:
        loss = F.cross_entropy(engine(x).float().view(-1, args.vocab), y.reshape(-1))
        engine.backward(loss)
        engine.step()

    persistent = [n for n in sizes if n <= effective["stage3_param_persistence_threshold"]]
    return step, dict(zero_config=effective, deepspeed=deepspeed.__version__,
                      params=len(sizes), param_numel=sum(sizes),
                      persistent_params=len(persistent), persistent_numel=sum(persistent),
                      layout=f"zero3 {env.world_size}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with common.session(args, need_group=True) as env:
        build = {"pipeline": pipeline, "experts": experts, "fsdp": fsdp, "tp": tp,
                 "mesh": mesh, "zero3": zero3}[args.case]
        step, labels = build(args, env)
        times = common.run_steps(args, env, step)
        received = labels.pop("_received", None)
        if received is not None:  # tokens each expert (rank) received, gathered on rank 0
            per_rank = [None] * env.world_size
            dist.all_gather_object(per_rank, sum(received))
            labels["tokens_received_per_rank"] = per_rank
        all_times = [None] * env.world_size
        dist.all_gather_object(all_times, [round(t, 3) for t in times])
        common.report(args, env, "parallel_cases", times, case=args.case,
                      step_ms_per_rank=all_times, **labels)


if __name__ == "__main__":
    main()
