"""The tensor-parallel cases of parallel_cases.py: a TP MLP (all-reduce TP, sequence
parallel, async TP; gradient-accumulation microbatches at one global batch) and a DeviceMesh
data x tensor parallel job (one rank host-bound on request)."""

from __future__ import annotations

import time

import common
import torch
import torch.distributed as dist
import torch.nn as nn


def _tp_mlp(args, env, mesh, mode: str | None = None) -> nn.Module:
    """args.layers // 2 blocks of LayerNorm, Linear(d, 4d), GELU, Linear(4d, d), tensor
    parallel over ``mesh``: the up projection column-wise, the down row-wise (no norms where
    ``mode`` is None: the mesh case, and tp_mlp as captured). ``allreduce``:
    each block's output all-reduced, the norms replicated (Megatron's TP); ``sp``/``async``:
    sequence parallel, the rows sharded between blocks, the norms on the shard, an all-gather
    before each up projection and a reduce-scatter after each down projection."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers // 2):
        layers += [nn.LayerNorm(args.dim) if mode else nn.Identity(),
                   nn.Linear(args.dim, 4 * args.dim, bias=False),
                   nn.GELU("tanh"), nn.Linear(4 * args.dim, args.dim, bias=False)]
    model = nn.Sequential(*layers).to(env.device)
    sp = mode not in (None, "allreduce")
    plan = {}
    for i in range(0, len(layers), 4):
        if sp:
            plan[str(i)] = SequenceParallel(sequence_dim=0)
        plan[str(i + 1)] = ColwiseParallel(input_layouts=Shard(0)) if sp else ColwiseParallel()
        plan[str(i + 3)] = RowwiseParallel(output_layouts=Shard(0)) if sp else RowwiseParallel()
    return parallelize_module(model, mesh, plan)


def tp(args, env) -> tuple[callable, dict]:
    """A TP MLP over all ranks on ``--batch`` rows per step, in ``--tp-microbatches``
    gradient-accumulation microbatches (the global batch stays ``--batch``). ``--tp-mode
    async``: sequence parallel compiled with Inductor's micro-pipelined (async) TP, which
    overlaps the all-gather and reduce-scatter with the matmuls; ``sp``: the same compiled
    without it (the control)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(env.device.type, (env.world_size,), mesh_dim_names=("tp",))
    model = _tp_mlp(args, env, mesh, args.tp_mode)
    if args.tp_mode != "allreduce":
        import torch._inductor.config as inductor_config

        inductor_config._micro_pipeline_tp = args.tp_mode == "async"
        if args.tp_mode == "async":
            try:  # needed up to torch 2.9; later releases find the group themselves
                from torch.distributed._symmetric_memory import enable_symm_mem_for_group

                enable_symm_mem_for_group(mesh.get_group().group_name)
            except (ImportError, AttributeError):
                pass
        model = torch.compile(model)
    # all-reduce TP leaves the norms' parameters plain tensors beside DTensors: no foreach
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=args.tp_mode != "allreduce")
    m, world = args.tp_microbatches, env.world_size
    rows = args.batch // m // (world if args.tp_mode != "allreduce" else 1)
    xs = [torch.randn(rows, args.dim, device=env.device) for _ in range(m)]

    def step(_: int) -> None:
        for x in xs:
            with common.autocast(env, torch.bfloat16 if env.is_cuda else None):
                out = model(x)
            if hasattr(out, "to_local"):
                out = out.to_local()
            (out.float().square().mean() / m).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, dict(layout=f"tp {world}", tp_batch=args.batch, tp_mode=args.tp_mode,
                      tp_microbatches=m, rows_per_microbatch=rows * (
                          world if args.tp_mode != "allreduce" else 1))


def mesh(args, env) -> tuple[callable, dict]:
    """DeviceMesh ("dp", "tp"): a TP MLP per dp replica, gradients all-reduced over dp."""
    from torch.distributed.device_mesh import init_device_mesh

    dp = env.world_size // 2
    m = init_device_mesh(env.device.type, (dp, 2), mesh_dim_names=("dp", "tp"))
    model = _tp_mlp(args, env, m["tp"])
    dp_group = m["dp"].get_group()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    x = torch.randn(args.batch * 8, args.dim, device=env.device)

    def step(_: int) -> None:
        if env.rank == args.host_bound_rank:
            with common.mark(args, "host_work"):
                time.sleep(0.03)
        with common.autocast(env, torch.bfloat16 if env.is_cuda else None):
            out = model(x)
        out.float().square().mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad.to_local(), group=dp_group)
        opt.step()
        opt.zero_grad(set_to_none=True)

    groups = {"dp": [dist.get_process_group_ranks(dp_group)],
              "tp": [dist.get_process_group_ranks(m["tp"].get_group())]}
    return step, dict(layout=f"dp {dp} x tp 2", my_groups=groups,
                      host_bound_rank=args.host_bound_rank)
