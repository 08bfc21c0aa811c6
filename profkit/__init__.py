"""profkit: GPU profiling and bottleneck analysis for PyTorch training and inference.

``import profkit`` stays light: the analysis side (pandas) and the capture side (torch)
load only when first used, so a training process pays for neither unless it asks.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "load_run": ("profkit.run.loader", "load_run"),
    "analyze": ("profkit.analyzers.api", "analyze"),
    "diff": ("profkit.analyzers.api", "diff"),
    "Run": ("profkit.model", "Run"),
    "RankData": ("profkit.model", "RankData"),
    "ProfkitError": ("profkit.errors", "ProfkitError"),
    "profile": ("profkit.collectors", "profile"),
    "mark": ("profkit.collectors", "mark"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'profkit' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = ["__version__", *_LAZY]
