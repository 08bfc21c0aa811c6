"""profkit.collectors: the capture side (torch profiler, NVML sampler, NCCL metadata).

Importing this package imports neither torch nor pandas; torch and pynvml are imported
lazily when a capture starts.

The entry points are the top-level modules :mod:`.profile` (``profile()``, ``mark()``) and
:mod:`.launch` (``profkit launch``, also ``python -m profkit.collectors.launch``). Beneath
them, each layer imports only the layers before it:

- the base modules: :mod:`.collector_errors` and :mod:`.run_dir_writes` (atomic writes
  into a run directory, its checks);
- :mod:`.job_facts`: rank identity and collectives, the ``run.json`` document, the NCCL
  flight recorder dump;
- :mod:`.nvml`: the GPU counter sampler (NVML, DCGM);
- :mod:`.tools`: ``profkit ncu``'s rerun under Nsight Compute;
- :mod:`.capture`: one capture session and its settings, triggers and losses;
- :mod:`.in_job`: the in-job summary of ``profile(summarize=True)``.
"""

from __future__ import annotations

from profkit.collectors.capture.profile_config import ProfileConfig
from profkit.collectors.collector_errors import CollectorError, OutputDirError
from profkit.collectors.nvml.sampler import NvmlSampler
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
