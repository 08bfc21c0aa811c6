"""Parallel-layout captures for profkit's layout detection (issue 37, item 1).

Three workloads on 4 GPUs, each with stock torch.profiler (3 active steps), traces written
to OUT/<mode>/rank<R>.json.gz, and one PROFKIT_LAYOUT line per rank with the independent
labels (how the groups were built):

- mesh: DeviceMesh (2, 2) named ("dp", "tp"); a tensor-parallel MLP (DTensor ColwiseParallel
  / RowwiseParallel on the "tp" dimension) whose gradients are all-reduced by hand over the
  "dp" dimension. Every rank does the same work.
- mesh_hostbound: the same, with rank --slow-rank sleeping --sleep-ms on the host before each
  layer's launch (a host-bound rank: its TP peer waits in the TP all-reduces, its DP peer in
  the gradient all-reduce).
- pipe4: a 4-stage GPipe pipeline (torch.distributed.pipelining, ScheduleGPipe) of Linear
  stages, --microbatches microbatches per step.

    torchrun --standalone --nproc_per_node 4 samples/zoo/layout_capture.py --mode mesh --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def mlp_block(dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.GELU(),
                         nn.Linear(4 * dim, dim, bias=False))


def build_mesh(args, rank, device):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    blocks = nn.ModuleList([mlp_block(args.dim) for _ in range(args.layers)]).to(device, torch.bfloat16)
    for block in blocks:
        parallelize_module(block, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    dp_group = mesh["dp"].get_group()
    params = [p for p in blocks.parameters()]
    opt = torch.optim.SGD(params, lr=1e-6)
    torch.manual_seed(100 + mesh["dp"].get_local_rank())  # TP peers share their input
    x = torch.randn(args.tokens, args.dim, device=device, dtype=torch.bfloat16)
    slow = args.mode == "mesh_hostbound" and rank == args.slow_rank

    def step():
        h = x
        for block in blocks:
            if slow:
                time.sleep(args.sleep_ms / 1e3 / args.layers)
            h = block(h)
        h.float().pow(2).mean().backward()
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=dp_group)  # data parallel over the "dp" dimension
        opt.step()
        opt.zero_grad(set_to_none=True)

    groups = {"dp": dist.get_process_group_ranks(dp_group),
              "tp": dist.get_process_group_ranks(mesh["tp"].get_group())}
    return step, {"layout": "dp 2 x tp 2", "groups": groups, "slow_rank": args.slow_rank if
                  args.mode == "mesh_hostbound" else None,
                  "sleep_ms_per_step": args.sleep_ms if args.mode == "mesh_hostbound" else 0.0}


def build_pipe(args, rank, world, device):
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    torch.manual_seed(rank)
    stage_mod = nn.Sequential(*[mlp_block(args.dim) for _ in range(args.layers)]).to(device)
    stage = PipelineStage(stage_mod, rank, world, device)
    sched = ScheduleGPipe(stage, args.microbatches,
                          loss_fn=lambda out, tgt: (out - tgt).pow(2).mean())
    torch.manual_seed(7)
    x = torch.randn(args.tokens, args.dim, device=device)
    y = torch.randn(args.tokens, args.dim, device=device)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=1e-6)

    def step():
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=[])
        else:
            sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)

    bubble = (world - 1) / (args.microbatches + world - 1)
    return step, {"layout": f"pipeline of {world} stages", "schedule": "GPipe",
                  "microbatches": args.microbatches, "bubble_theory": round(bubble, 3)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("mesh", "mesh_hostbound", "pipe4"), required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=0)
    p.add_argument("--sleep-ms", type=float, default=8.0)
    p.add_argument("--microbatches", type=int, default=4)
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    if args.mode == "pipe4":
        step, label = build_pipe(args, rank, world, device)
    else:
        step, label = build_mesh(args, rank, device)
    out = args.out / args.mode
    out.mkdir(parents=True, exist_ok=True)
    times = []
    sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=sched, record_shapes=True,
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(out / f"rank{rank}.json.gz"))) as prof:
        for _ in range(args.steps):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            prof.step()
    print("PROFKIT_LAYOUT " + json.dumps({"mode": args.mode, "rank": rank, "world_size": world,
                                           "median_step_ms": round(statistics.median(times[2:]), 3),
                                           **label}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
