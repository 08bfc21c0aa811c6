"""Build the ``run.json`` document (schema ``profkit.run/1``, see docs/run-directory.md)."""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import time
import uuid
from typing import Any

log = logging.getLogger(__name__)

SCHEMA = "profkit.run/1"
RUN_JSON = "run.json"
LAUNCH_COMMAND_ENV = "PROFKIT_LAUNCH_COMMAND"
STATUS_RUNNING, STATUS_OK, STATUS_FAILED = "running", "ok", "failed"
# the job went on but the capture did not: a write failed (collectors/capture/losses.py),
# or, in the in-job report, ranks never answered
STATUS_INCOMPLETE = "incomplete"
ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_NCCL_", "TORCH_", "PYTORCH_", "OMP_", "MKL_",
                "CUBLAS_", "CUDNN_", "PROFKIT_")
ENV_NAMES = ("OMP_NUM_THREADS", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
             "GROUP_RANK", "ROLE_RANK")
# Variables whose values may hold secrets even under a knob prefix.
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY")


def new_run_id() -> str:
    """A fresh unique run id: UTC time plus random hex, sortable by start."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:12]


def env_run_id() -> str | None:
    """A run id every rank can compute alike without collectives: PROFKIT_RUN_ID, else
    torchrun's TORCHELASTIC_RUN_ID (when not the default 'none')."""
    rid = os.environ.get("PROFKIT_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID")
    return rid if rid and rid != "none" else None


def env_knobs(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Tuning knobs of the environment (NCCL_*, CUDA_*, TORCH_*, OMP_NUM_THREADS, ...)."""
    environ = dict(os.environ if environ is None else environ)
    out = {}
    for k, v in environ.items():
        if not (k.startswith(ENV_PREFIXES) or k in ENV_NAMES):
            continue
        if any(m in k for m in _SECRET_MARKERS):
            continue
        out[k] = v
    return dict(sorted(out.items()))


def versions(driver: str = "") -> dict[str, str]:
    """torch / CUDA / NCCL / python / profkit / driver versions; '' where unknown."""
    from profkit import __version__

    out = {"torch": "", "cuda": "", "nccl": "", "python": platform.python_version(),
           "profkit": __version__, "driver": driver}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda or getattr(torch.version, "hip", None) or ""
        if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
            v = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - versions are best effort
        log.debug("version lookup failed", exc_info=True)
    return out


def torch_settings() -> dict[str, Any]:
    """The job's PyTorch backend switches that change which kernels run and how they are
    chosen, when the capture starts: cuDNN's benchmark mode (every new input shape times all
    convolution algorithms), determinism, TF32 and the float32 matmul precision; {} without
    torch."""
    try:
        import torch

        return {"cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
                "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
                "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "float32_matmul_precision": str(torch.get_float32_matmul_precision())}
    except Exception:  # noqa: BLE001 - best effort, as the versions
        log.debug("torch settings lookup failed", exc_info=True)
        return {}


def pcie_link(nvml: Any, uuid: str) -> dict[str, int]:
    """``{"pcie_gen", "pcie_width"}`` of a GPU's host link from NVML (the link's maximum:
    an idle link trains down to save power, a transfer runs at the maximum); {} if unknown.
    The analysis judges host<->device copies against this link's peak."""
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
        gen = int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
        width = int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    except Exception:  # noqa: BLE001 - no NVML, an AMD GPU, an old driver: the model's link
        log.debug("PCIe link of %s unknown", uuid, exc_info=True)
        return {}
    return {"pcie_gen": gen, "pcie_width": width} if gen > 0 and width > 0 else {}


def local_gpus(host: str, nvml: Any = None) -> list[dict[str, Any]]:
    """The GPUs visible to this process (torch.cuda), as run.json ``gpus`` entries (with their
    PCIe link when ``nvml``, an initialised pynvml, is given)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return []
        gpus = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            uid = str(getattr(p, "uuid", ""))
            uuid = uid if uid.startswith("GPU-") else f"GPU-{uid}"
            gpus.append({"name": p.name, "uuid": uuid, "sm_count": int(p.multi_processor_count),
                         "memory_bytes": int(p.total_memory), "host": host, "index": i,
                         **(pcie_link(nvml, uuid) if nvml is not None else {})})
        return gpus
    except Exception:  # noqa: BLE001
        log.debug("GPU lookup failed", exc_info=True)
        return []


def process_groups() -> list[dict[str, Any]]:
    """Known process groups ``{name, desc, ranks, backend}`` (private torch API, best effort)."""
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return []
        from torch.distributed.distributed_c10d import _world

        out = []
        for pg, ranks_map in _world.pg_group_ranks.items():
            out.append({"name": _world.pg_names.get(pg, ""),
                        "desc": getattr(pg, "group_desc", ""),
                        "ranks": sorted(ranks_map.keys()),
                        "backend": str(dist.get_backend(pg))})
        return out
    except Exception:  # noqa: BLE001
        log.debug("process group lookup failed", exc_info=True)
        return []


def merge_gpus(per_rank_gpus: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Deduplicate GPU lists gathered from every rank (one entry per host+uuid)."""
    seen, out = set(), []
    for gpus in per_rank_gpus:
        for g in gpus:
            key = (g.get("host"), g.get("uuid"), g.get("index"))
            if key not in seen:
                seen.add(key)
                out.append(g)
    return out


def build_run_json(*, run_id: str, ranks: list[dict[str, Any]], world_size: int,
                   gpus: list[dict[str, Any]],
                   clock_offsets_ns: dict[str, int], profiler: dict[str, Any],
                   started_ns: int, driver: str = "") -> dict[str, Any]:
    """The initial run.json document (status ``running``)."""
    hosts = list(dict.fromkeys(r["host"] for r in ranks))
    return {
        "schema": SCHEMA, "run_id": run_id, "status": STATUS_RUNNING, "error": None,
        "world_size": world_size, "started_ns": started_ns, "ended_ns": None,
        "hosts": hosts,
        "ranks": {str(r["rank"]): {k: r[k] for k in
                                   ("host", "pid", "local_rank", "device", "gpu_uuid")}
                  for r in ranks},
        "gpus": gpus, "versions": versions(driver), "torch_settings": torch_settings(),
        "command": launch_command(), "argv": list(sys.argv),
        "env": env_knobs(), "process_groups": process_groups(),
        "clock_offsets_ns": clock_offsets_ns, "profiler": profiler,
    }


def launch_command() -> list[str]:
    """The job's launch command: what ``profkit launch`` ran (PROFKIT_LAUNCH_COMMAND, JSON),
    else this process's ``sys.argv``."""
    raw = os.environ.get(LAUNCH_COMMAND_ENV)
    if raw:
        try:
            cmd = json.loads(raw)
            if isinstance(cmd, list):
                return [str(c) for c in cmd]
        except ValueError:
            pass
    return list(sys.argv)


def error_dict(exc: BaseException | None) -> dict[str, str] | None:
    """``{type, message}`` of an exception (qualified type name), or None."""
    if exc is None:
        return None
    t = type(exc)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    return {"type": name, "message": str(exc)}
