"""profkit.collectors: the capture side (torch profiler, NVML sampler, NCCL metadata).

Importing this package imports neither torch nor pandas; torch and pynvml are imported
lazily when a capture starts.
"""

from __future__ import annotations

from profkit.collectors.config import ProfileConfig
from profkit.collectors.errors import CollectorError, OutputDirError
from profkit.collectors.nvml import NvmlSampler
from profkit.collectors.profile import Profile, mark, profile

__all__ = [
    "CollectorError", "NvmlSampler", "OutputDirError", "Profile", "ProfileConfig",
    "launch_main", "mark", "profile",
]


def __getattr__(name: str):
    # launch is imported on first use only: `python -m profkit.collectors.launch` runs it as
    # __main__, and runpy warns when the package has already imported it under its name.
    if name == "launch_main":
        from profkit.collectors.launch import launch_main

        return launch_main
    raise AttributeError(f"module 'profkit.collectors' has no attribute {name!r}")
