"""Shared by the framework samples (hf_trainer.py, lightning_train.py): options, random
token data and importing profkit.integrations from an uninstalled checkout (each optimizer
step is timed by common.StepClock)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

import common
import torch

# The model shape of train_gpt's FULL (4 layers, width 1024, 512 tokens); each sample sets
# the batch that gives about 30 ms per step in bf16 (measured on one H100).
FULL = dict(seq=512, layers=4, dim=1024, heads=16, vocab=8192)
TINY = dict(batch=2, seq=32, layers=1, dim=32, heads=2, vocab=256)


def parse_args(description: str, script: str, argv: list[str] | None,
               batch: int) -> argparse.Namespace:
    """Options of a framework sample; ``batch``: its full-size sequences per rank."""
    p = argparse.ArgumentParser(description=description)
    common.add_common_args(p, profiler="profkit", steps=12)
    p.add_argument("--batch", type=int, help="sequences per rank and optimizer step")
    p.add_argument("--seq", type=int, help="tokens per sequence")
    for name in ("layers", "dim", "heads", "vocab"):
        p.add_argument(f"--{name}", type=int)
    args = common.resolve_sizes(p.parse_args(argv), {**FULL, "batch": batch}, TINY)
    if args.profiler == "torch":
        p.error("the framework samples profile through the profkit callback: "
                "--profiler profkit or none")
    if args.step_marker or args.summarize:
        p.error("--step-marker and --summarize are not supported by the framework samples")
    common.validate(args, script)
    return args


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment (1 process without it)."""
    return (int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
            int(os.environ.get("LOCAL_RANK", 0)))


def local_world_size() -> int:
    """Processes on this node (torchrun's LOCAL_WORLD_SIZE; 1 without torchrun)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", 1))


def device_of(args: argparse.Namespace) -> torch.device:
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for, but torch sees no CUDA device")
    return torch.device(name, world()[2]) if name == "cuda" else torch.device("cpu")


def env_of(device: torch.device) -> common.Env:
    rank, size, local = world()
    return common.Env(rank, size, local, device, size > 1)


class RandomTokens(torch.utils.data.Dataset):
    """``n`` sequences of ``seq + 1`` random token ids, the same for a given index on every
    run: items ``{"input_ids", "labels"}`` of ``seq`` tokens, labels shifted by one."""

    def __init__(self, n: int, seq: int, vocab: int):
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(self.vocab, (self.seq + 1,), generator=g)
        return {"input_ids": ids[:-1], "labels": ids[1:]}


def profkit_callback(framework: str, args: argparse.Namespace, device: torch.device):
    """``profkit.integrations.<framework>.ProfkitCallback`` with the samples' schedule, or
    None for --profiler none."""
    if args.profiler == "none":
        return None
    module = import_integration(framework)
    return module.ProfkitCallback(args.out, wait=common.PROFILE_WAIT,
                                  warmup=common.PROFILE_WARMUP, active=args.active,
                                  with_stack=args.with_stack, nvml=device.type == "cuda")


def import_integration(framework: str):
    """profkit.integrations.<framework>, also from an uninstalled checkout: the installed
    package maps collectors/integrations/ to profkit.integrations, and extending
    profkit.__path__ with the repository root and collectors/ makes the same mapping."""
    name = f"profkit.integrations.{framework}"
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if e.name not in ("profkit", "profkit.integrations"):
            raise  # the framework itself is missing: say so
    sys.path.insert(0, str(common.REPO_ROOT))
    import profkit

    for folder in (common.REPO_ROOT, common.REPO_ROOT / "collectors"):
        if str(folder) not in profkit.__path__:
            profkit.__path__.append(str(folder))
    return importlib.import_module(name)
