"""Rank identity and the few collectives the capture side needs (torch imported lazily).

Collectives run on a dedicated gloo "control" group when the default group uses another
backend, so that they never touch the GPU stream (no device sync) and work on CPU too.
They are only called where every rank is known to be present: at capture start and at
the agreed trigger check points, never at exit (a failing rank must not hang the others;
the in-job summary goes through the job's key-value store instead, see
:mod:`profkit.collectors.in_job.store`).
"""

from __future__ import annotations

import logging
import os
import socket
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

log = logging.getLogger(__name__)

CLOCK_ROUNDS = 5

_control_group: Any = None


@dataclass(frozen=True)
class RankInfo:
    """Who this process is. ``device`` is the CUDA index or -1 without a GPU."""

    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    device: int = -1
    gpu_uuid: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def dist_ready() -> bool:
    """True when torch.distributed is importable and initialised (without importing torch
    if the user has not)."""
    import sys

    if "torch" not in sys.modules:
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def rank_info(device: int | None = None) -> RankInfo:
    """This process's rank from torch.distributed if initialised, else torchrun's env."""
    rank, world = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    if dist_ready():
        import torch.distributed as dist

        rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = _env_int("LOCAL_RANK", 0)
    if device is None:
        device = _current_cuda_device()
    return RankInfo(rank, world, local_rank, socket.gethostname(), os.getpid(), device,
                    _gpu_uuid(device))


def _current_cuda_device() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a broken CUDA setup must not stop capture
        log.debug("no CUDA device", exc_info=True)
    return -1


def _gpu_uuid(device: int) -> str:
    if device < 0:
        return ""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device).uuid)
        return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    except Exception:  # noqa: BLE001
        return ""


def control_group() -> Any:
    """A gloo group over all ranks (the default group when it is gloo already).

    Must be called collectively the first time; cached afterwards."""
    global _control_group
    if _control_group is not None:
        return _control_group
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        _control_group = dist.group.WORLD
    else:
        try:
            _control_group = dist.new_group(backend="gloo")
        except Exception:  # noqa: BLE001 - fall back to the default group
            log.warning("profkit: cannot create a gloo control group; using the default group")
            _control_group = dist.group.WORLD
    return _control_group


def default_store() -> Any:
    """The default process group's key-value store (under torchrun, the job's rendezvous
    TCPStore), or None when torch.distributed is not initialised. Taken at capture start:
    the store object keeps working after the user destroys the process group, so the
    in-job summary can still reach the other ranks through it."""
    if not dist_ready():
        return None
    from torch.distributed import distributed_c10d

    try:
        return distributed_c10d._get_default_store()  # no public accessor in torch 2.x
    except Exception:  # noqa: BLE001 - the summary is optional; the capture is not
        log.warning("profkit: the process group's key-value store is not reachable; "
                    "no in-job summary for this run", exc_info=True)
        return None


def _tensor_device(group: Any) -> Any:
    import torch
    import torch.distributed as dist

    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_gather_object(obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]``; ``[obj]`` when not distributed."""
    if not dist_ready():
        return [obj]
    import torch.distributed as dist

    group = control_group()
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj, group=group)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank; ``obj`` itself when not distributed."""
    if not dist_ready():
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=src, group=control_group())
    return box[0]


def any_rank(flag: bool) -> bool:
    """True on every rank when ``flag`` is true on at least one (a MAX all-reduce)."""
    if not dist_ready():
        return flag
    import torch
    import torch.distributed as dist

    group = control_group()
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_tensor_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return bool(t.item())


def measure_clock_offsets(rounds: int = CLOCK_ROUNDS) -> dict[str, int]:
    """``{rank: t_rank - t_0}`` in ns, the median over ``rounds`` barrier+timestamp rounds."""
    if not dist_ready():
        return {"0": 0}
    import torch
    import torch.distributed as dist

    group = control_group()
    world, device = dist.get_world_size(), _tensor_device(group)
    diffs: list[list[int]] = [[] for _ in range(world)]
    for _ in range(rounds):
        dist.barrier(group=group)
        mine = torch.tensor([time.time_ns()], dtype=torch.int64, device=device)
        got = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(got, mine, group=group)
        stamps = [int(t.item()) for t in got]
        for r in range(world):
            diffs[r].append(stamps[r] - stamps[0])
    return {str(r): int(statistics.median(d)) for r, d in enumerate(diffs)}
