"""Dump PyTorch's NCCL flight recorder (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0) per rank."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from profkit.collectors.run_dir_writes import write_bytes_atomic

log = logging.getLogger(__name__)

NCCL_DIR = "nccl"
FR_NAME = "flight_recorder_rank{rank}.pkl"
FR_BUFFER_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
# Newest first: the NCCL-specific dump includes communicator state.
_DUMP_FUNCS = ("_dump_nccl_trace", "_dump_fr_trace")


def flight_recorder_enabled(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    for name in FR_BUFFER_ENVS:
        try:
            if int(env.get(name, "0")) > 0:
                return True
        except ValueError:
            continue
    return False


def dump_flight_recorder(run_dir: str | Path, rank: int) -> Path | None:
    """Write ``nccl/flight_recorder_rank{R}.pkl``; None when disabled or unavailable."""
    if not flight_recorder_enabled():
        return None
    try:
        import torch

        c10d = torch._C._distributed_c10d
        fn = next((getattr(c10d, n) for n in _DUMP_FUNCS if hasattr(c10d, n)), None)
        if fn is None:
            return None
        data = fn()
    except Exception:  # noqa: BLE001 - private API, may be absent or fail
        log.debug("flight recorder dump failed", exc_info=True)
        return None
    if not data:
        return None
    return write_bytes_atomic(Path(run_dir) / NCCL_DIR / FR_NAME.format(rank=rank), bytes(data))
